"""The pysyncobj recipe, storage (see recipe_source.py for what the recipe tests are for): the
FileJournal members the journal overrides, and the snapshot path that snapshot_writer.py and
snapshot_guard.py replace or wrap (the load, the election deadline re-armed after it, the rejoin
hold and the read before standing)."""

from __future__ import annotations

import hashlib

import pysyncobj
import pysyncobj.journal
import pysyncobj.monotonic
import pysyncobj.syncobj
from pysyncobj.serializer import Serializer
from pysyncobj.syncobj import SyncObj
from pysyncobj.transport import TCPTransport

from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.journal_factory import create_journal, install_journal_factory

from recipe_source import params, source


# -- FileJournal ---------------------------------------------------------------------------------------

def test_file_journal_members_we_override_exist():
    FileJournal = pysyncobj.journal.FileJournal
    assert params(FileJournal.add) == ["self", "command", "idx", "term"]
    assert params(FileJournal.clear) == ["self"]
    assert params(FileJournal.deleteEntriesFrom) == ["self", "entryFrom"]
    assert params(FileJournal.deleteEntriesTo) == ["self", "entryTo"]
    assert params(FileJournal.flush) == ["self"]
    assert "self.__metaStorer = MetaStorer(journalFile + '.meta')" in source(FileJournal.__init__)
    assert "self.__metaStorer.storeMeta(self.__meta)" in source(FileJournal.setCurrentTerm)
    assert params(pysyncobj.journal.MetaStorer.storeMeta) == ["self", "meta"]
    assert "self.__mm.flush()" in source(pysyncobj.journal.ResizableFile.flush)


def test_file_journal_internals_our_compaction_rewrites_exist(tmp_path):
    FileJournal = pysyncobj.journal.FileJournal
    # Our atomic compaction writes records in add()'s format and swaps these private fields.
    add = source(FileJournal.add)
    for line in (
        "cmdData = struct.pack('<QQ', idx, term) + to_bytes(command)",
        "cmdLenData = struct.pack('<I', len(cmdData))",
        "cmdData = cmdLenData + cmdData + cmdLenData",
        "self.__setLastRecordOffset(self.__currentOffset)",
    ):
        assert line in add, line
    assert "struct.pack('<I', offset)" in source(FileJournal._FileJournal__setLastRecordOffset)
    journal = FileJournal(str(tmp_path / "j"))
    for name in ("__journal", "__journalFile", "__currentOffset"):
        assert hasattr(journal, "_FileJournal" + name), name
    assert callable(journal._FileJournal__getDefaultHeader)
    assert params(pysyncobj.journal.ResizableFile.__init__) == ["self", "fileName", "initialSize", "resizeFactor", "defaultContent"]
    assert pysyncobj.journal.LAST_RECORD_OFFSET_OFFSET == 36 and pysyncobj.journal.FIRST_RECORD_OFFSET == 40
    journal._destroy()


def test_journal_factory_install_replaces_the_module_global():
    install_journal_factory()
    assert pysyncobj.syncobj.createJournal is create_journal


# -- snapshots (snapshot_writer.py, snapshot_guard.py) --------------------------------------------------

# sha256 of inspect.getsource(SyncObj.__loadDumpFile) in 0.3.17: SnapshotGuardedSyncObj._load_dump
# does the same work and raises instead of clearing or going on empty; re-read it on any change.
LOAD_DUMP_FILE_SOURCE_SHA256 = "ec66e83905de703bcead2735be875e71870a6bbe271c854867611e555a90bbba"


def test_syncobj_load_dump_file_that_the_snapshot_guard_replaces_is_unchanged():
    digest = hashlib.sha256(source(SyncObj._SyncObj__loadDumpFile).encode()).hexdigest()
    assert digest == LOAD_DUMP_FILE_SOURCE_SHA256, "SyncObj.__loadDumpFile changed: re-read snapshot_guard.py"


def test_syncobj_snapshot_calls_the_writer_relies_on():
    init = source(SyncObj.__init__)
    assert "self.__serializer = Serializer(self.__conf.fullDumpFile," in init  # the module global we replace
    assert hasattr(pysyncobj.syncobj, "Serializer")
    assert "self.__needLoadDumpFile = True" in init
    tick = source(SyncObj._onTick)
    assert "self.__loadDumpFile(clearJournal=False)" in tick and "self.__needLoadDumpFile = False" in tick
    # checkSerializing is polled only by the compaction, which compacts right after SUCCESS: the
    # rename we do inside checkSerializing is immediately followed by the compaction.
    compaction = source(SyncObj._SyncObj__tryLogCompaction)
    assert compaction.index("self.__serializer.checkSerializing()") < compaction.index("self.__deleteEntriesTo(serializeID)")
    handler = source(SyncObj._SyncObj__onMessageReceived)
    assert "if self.__serializer.setTransmissionData(serialized):\n                    self.__loadDumpFile(clearJournal=True)" in handler
    assert "self.__serializer.getTransmissionData(node)" in source(SyncObj._SyncObj__sendAppendEntries)
    assert "self._doDestroy()" in source(SyncObj._autoTickThread)
    for name in ("_SyncObj__getCurrentLogIndex", "_SyncObj__updateClusterConfiguration", "_SyncObj__onSetCodeVersion"):
        assert callable(getattr(SyncObj, name))


def test_snapshot_writer_has_every_serializer_method_pysyncobj_calls():
    from queen_raft.raft.snapshot_writer import SnapshotSerializer

    called = {"checkSerializing", "serialize", "deserialize", "getTransmissionData", "setTransmissionData",
              "cancelTransmisstion"}
    stock = {name for name in vars(Serializer) if not name.startswith("_")}
    assert stock == called
    for name in called:
        assert params(getattr(SnapshotSerializer, name)) == params(getattr(Serializer, name))


def test_snapshot_guard_overrides_are_real_overrides_used_by_the_group():
    from queen_raft.raft.snapshot_guard import SnapshotGuardedSyncObj

    assert issubclass(CoalescingSyncObj, SnapshotGuardedSyncObj)
    for name in ("_SyncObj__loadDumpFile", "_onTick", "waitBinded", "_doDestroy"):
        assert name in vars(SnapshotGuardedSyncObj) and callable(getattr(SyncObj, name))


def test_syncobj_election_deadline_the_start_re_arms():
    # SnapshotGuardedSyncObj._rearm_election_deadline: the deadline is armed at construction (before
    # the journal opens and the snapshot loads), drawn by __generateRaftTimeout on pysyncobj's
    # monotonic clock, and read by the election check of every tick.
    init = source(SyncObj.__init__)
    armed = "self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()"
    assert init.index(armed) < init.index("self.__raftLog = createJournal(self.__conf.journalFile)")
    assert params(SyncObj._SyncObj__generateRaftTimeout) == ["self"]
    draw = source(SyncObj._SyncObj__generateRaftTimeout)
    assert "self.__conf.raftMinTimeout" in draw and "self.__conf.raftMaxTimeout" in draw
    assert pysyncobj.syncobj.monotonicTime is pysyncobj.monotonic.monotonic
    tick = source(SyncObj._onTick)
    assert tick.index("self.__loadDumpFile(clearJournal=False)") < tick.index(
        "if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():")


def test_the_start_re_arms_the_election_deadline_from_the_end_of_its_load():
    from queen_raft.raft.snapshot_guard import SnapshotGuardedSyncObj

    class Conf:
        raftMinTimeout, raftMaxTimeout = 0.2, 0.6

    node = object.__new__(SnapshotGuardedSyncObj)
    node._SyncObj__conf = Conf()
    node._SyncObj__raftElectionDeadline = 0.0  # armed at construction, long past after a slow load
    before = pysyncobj.monotonic.monotonic()
    node._rearm_election_deadline()
    after = pysyncobj.monotonic.monotonic()
    assert before + 0.2 <= node._SyncObj__raftElectionDeadline <= after + 0.6


def test_syncobj_members_the_rejoin_hold_reads():
    # SnapshotGuardedSyncObj._hold_candidacy_while_rejoining: a leader heard sets __raftLeader to
    # the sender; __otherNodes and __connectedNodes are sets of the transport's Node objects (the
    # transport is given __otherNodes itself and reports connections through __onNodeConnected);
    # the election check reads the deadline our _onTick wrapper moves before calling it.
    init = source(SyncObj.__init__)
    assert "self.__otherNodes = set() # set of Node" in init and "self.__connectedNodes = set() # set of Node" in init
    assert "self.__transport = transportClass(self, self.__selfNode, self.__otherNodes)" in init
    assert "self.__transport.setOnNodeConnectedCallback(self.__onNodeConnected)" in init
    assert "self.__connectedNodes.add(node)" in source(SyncObj._SyncObj__onNodeConnected)
    assert "self.__raftLeader = None" in init
    handler = source(SyncObj._SyncObj__onMessageReceived)
    appended = handler.index("if message['type'] == 'append_entries' and message['term'] >= self.__raftCurrentTerm:")
    assert handler.index("self.__raftLeader = node", appended) > appended
    assert "self.__raftLeader = self.__selfNode" in source(SyncObj._SyncObj__onBecomeLeader)
    conf = pysyncobj.SyncObjConf()
    assert isinstance(conf.connectionTimeout, float) and isinstance(conf.connectionRetryTime, float)
    # A pending dial is given up at connectionTimeout (the connection's timeout) and redialled
    # after connectionRetryTime: the two parts of the hold's bound.
    assert "timeout = self._syncObj.conf.connectionTimeout" in source(TCPTransport.addNode)
    assert "self._syncObj.conf.connectionRetryTime" in source(TCPTransport._connectIfNecessarySingle)


class _HoldConf:
    raftMinTimeout, raftMaxTimeout = 0.2, 0.6
    connectionTimeout, connectionRetryTime = 3.5, 0.5


def _holding_node(connected: set, others: set, hold_s: float = 4.0):
    from queen_raft.raft.snapshot_guard import SnapshotGuardedSyncObj

    node = object.__new__(SnapshotGuardedSyncObj)
    node._SyncObj__conf = _HoldConf()
    node._SyncObj__raftElectionDeadline = 0.0
    node._SyncObj__raftLeader = None
    node._SyncObj__otherNodes = others
    node._SyncObj__connectedNodes = connected
    node._rejoin_hold_ends = pysyncobj.monotonic.monotonic() + hold_s
    return node


def test_the_rejoin_hold_keeps_the_deadline_ahead_until_every_member_is_connected():
    node = _holding_node(connected={"f"}, others={"f", "leader"})
    before = pysyncobj.monotonic.monotonic()
    node._hold_candidacy_while_rejoining()
    assert node._SyncObj__raftElectionDeadline >= before + 0.2  # one follower reached: held
    node._SyncObj__raftElectionDeadline = 0.0
    node._SyncObj__connectedNodes = {"f", "leader"}
    node._hold_candidacy_while_rejoining()
    assert node._SyncObj__raftElectionDeadline == 0.0  # every member reached: the deadline runs
    assert node._rejoin_hold_ends is not None


def test_the_rejoin_hold_ends_at_a_leader_heard_or_at_its_bound():
    node = _holding_node(connected={"f"}, others={"f", "leader"})
    node._SyncObj__raftLeader = "leader"
    node._hold_candidacy_while_rejoining()
    assert node._rejoin_hold_ends is None and node._SyncObj__raftElectionDeadline == 0.0
    alone = _holding_node(connected={"f"}, others={"f", "leader"}, hold_s=-0.001)
    alone._hold_candidacy_while_rejoining()
    assert alone._rejoin_hold_ends is None and alone._SyncObj__raftElectionDeadline == 0.0

def test_syncobj_tick_checks_the_election_deadline_before_its_poll():
    # SnapshotGuardedSyncObj._read_waiting_messages_before_standing: stock checks the deadline at the
    # start of a tick and reads the sockets only at its end, so what arrived during a stall is unread
    # at the check; a snapshot from the leader is loaded inside the message's handler.
    tick = source(SyncObj._onTick)
    assert tick.index("if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():") < tick.index(
        "self._poller.poll(timeToWait)")
    handler = source(SyncObj._SyncObj__onMessageReceived)
    appended = handler.index("if message['type'] == 'append_entries' and message['term'] >= self.__raftCurrentTerm:")
    assert handler.index("self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()", appended) > appended
    assert handler.index("self.__loadDumpFile(clearJournal=True)", appended) > appended
    init = source(SyncObj.__init__)
    assert "self._poller = createPoller(self.__conf.pollerType)" in init
    assert "self.__raftState = _RAFT_STATE.FOLLOWER" in init and "self.__selfNode = " in init


class _Poller:
    def __init__(self) -> None:
        self.polls: list[float] = []

    def poll(self, timeout: float) -> None:
        self.polls.append(timeout)


def _stalled_node(state, deadline: float):
    from queen_raft.raft.snapshot_guard import SnapshotGuardedSyncObj

    class Transport:
        ready = True

    node = object.__new__(SnapshotGuardedSyncObj)
    node._SyncObj__raftState, node._SyncObj__selfNode = state, "self"
    node._SyncObj__raftElectionDeadline, node._SyncObj__transport = deadline, Transport()
    node._poller = _Poller()
    return node


def test_a_follower_past_its_deadline_reads_its_sockets_before_the_election_check():
    from pysyncobj.syncobj import _RAFT_STATE

    now = pysyncobj.monotonic.monotonic()
    past = _stalled_node(_RAFT_STATE.FOLLOWER, deadline=now - 1.0)
    past._read_waiting_messages_before_standing()
    assert past._poller.polls == [0]  # without waiting: a node whose leader is gone stands this tick
    for node in (_stalled_node(_RAFT_STATE.FOLLOWER, deadline=now + 1.0), _stalled_node(_RAFT_STATE.LEADER, now - 1.0)):
        node._read_waiting_messages_before_standing()
        assert node._poller.polls == []
