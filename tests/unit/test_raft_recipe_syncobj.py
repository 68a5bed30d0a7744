"""The pysyncobj recipe, SyncObj (see recipe_source.py for what the recipe tests are for): the tick,
handler and send code that group commit, compaction, follower_append.py, stored_term.py,
follower_poll.py, leader_append.py and quiet_messages.py override or rely on, pinned by line or hash."""

from __future__ import annotations

import hashlib

import pysyncobj
import pysyncobj.journal
import pysyncobj.syncobj
import pytest
from pysyncobj.serializer import Serializer
from pysyncobj.syncobj import SyncObj, SyncObjConsumer

from queen_raft.raft.follower_append import LogMatchingSyncObj
from queen_raft.raft.follower_poll import FollowerPollSyncObj
from queen_raft.raft.stored_term import StoredTermSyncObj
from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.quiet_messages import QuietMessagesSyncObj

from recipe_source import params, source


# -- SyncObj -----------------------------------------------------------------------------------------

def test_syncobj_private_members_we_read_exist():
    init = source(SyncObj.__init__)
    assert "self.__raftLog = createJournal(self.__conf.journalFile)" in init
    assert init.index("self.__raftLog = createJournal") < init.index("self.__transport = transportClass(self, self.__selfNode, self.__otherNodes)")
    assert "self.__pipeNotifier = PipeNotifier(self._poller)" in init
    assert "self.__raftState = _RAFT_STATE.FOLLOWER" in init
    assert hasattr(pysyncobj.syncobj, "createJournal")
    assert params(pysyncobj.syncobj.createJournal) == ["journalFile"]


def test_syncobj_tick_order_group_commit_relies_on():
    tick = source(SyncObj._onTick)
    # Leader commit scan first, then apply, then new commands appended, then the tick callbacks
    # (our flush), then poll (where follower acks and new appends arrive).
    order = [
        "commitIdx = self.__raftCommitIndex",
        "needSendAppendEntries = self.__applyLogEntries()",
        "self._checkCommandsToApply()",
        "callback()",
        "self._poller.poll(timeToWait)",
    ]
    positions = [tick.index(fragment) for fragment in order]
    assert positions == sorted(positions)
    handler = source(SyncObj._SyncObj__onMessageReceived)
    add = handler.index("self.__raftLog.add(*entry)")
    reply = handler.index("self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)")
    assert add < reply  # the acknowledgement we hold until the flush
    assert "'type': 'next_node_idx'" in source(SyncObj._SyncObj__sendNextNodeIdx)
    # The leader adds its entries in _checkCommandsToApply, which runs before the callbacks.
    assert "self.__raftLog.add(command, idx, term)" in source(SyncObj._checkCommandsToApply)


def test_syncobj_snapshot_path_we_rely_on():
    compaction = source(SyncObj._SyncObj__tryLogCompaction)
    assert "data.append(consumer._serialize())" in compaction
    assert "self.__deleteEntriesTo(serializeID)" in compaction
    assert "consumer._deserialize(consumersData[i])" in source(SyncObj._SyncObj__loadDumpFile)
    # The forked path is used only without a custom serializer: we keep it.
    assert "serializer is None" in source(Serializer.__init__)
    assert "os.fork()" in source(Serializer.serialize)
    assert params(SyncObjConsumer._serialize) == ["self"]
    assert params(SyncObjConsumer._deserialize) == ["self", "data"]
    assert "callback(oldState, newState)" in source(SyncObj._SyncObj__setState)



def test_syncobj_compaction_gate_we_mirror():
    # compaction_gate.py declines before stock prepares a writer's data, only past stock's own gate,
    # and hands the serializer's check the index stock hands serialize().
    compaction = source(SyncObj._SyncObj__tryLogCompaction)
    assert "if len(self.__raftLog) <= self.__conf.logCompactionMinEntries and \\\n" in compaction
    assert "currTime - self.__lastSerializedTime <= self.__conf.logCompactionMinTime and \\\n" in compaction
    assert "lastAppliedEntries = self.__getEntries(self.__raftLastApplied - 1, 2)" in compaction
    assert "cluster), lastAppliedEntries[0][1])" in compaction
    assert compaction.index("checkSerializing()") < compaction.index("self.__forceLogCompaction = False")


def test_syncobj_compaction_skip_the_snapshot_repair_clears():
    # snapshot_repair.py forgets the last serialized index so that a compaction at the same index
    # writes a new file: pysyncobj skips one whose index equals __lastSerializedEntry.
    compaction = source(SyncObj._SyncObj__tryLogCompaction)
    assert "lastAppliedEntries[0][1] == self.__lastSerializedEntry" in compaction
    assert "self.__forceLogCompaction = False" in compaction
    assert "self.__lastSerializedEntry = None" in source(SyncObj.__init__)

# -- SyncObj: the follower's append_entries (follower_append.py) ----------------------------------------

# sha256 of inspect.getsource() of each SyncObj method LogMatchingSyncObj wraps or calls, in 0.3.17.
# The override hands the stock handler rewritten messages and relies on what it then does (below);
# any change to these bodies means re-reading follower_append.py against the new code.
FOLLOWER_APPEND_SOURCE_SHA256 = {
    "_SyncObj__onMessageReceived": "ddfe34b6c02821795146dc533fb7c0fcf6574a082a68a227b4c885c9e14be206",
    "_SyncObj__getEntries": "e29c4b33293b21018d1124c7e5835748c4c8092f7ce4af9e86f24633ccec7e0e",
    "_SyncObj__sendNextNodeIdx": "68aaeefc267b8896bc1074280ac2aa014c3306d9f207949ed945569cef5d114c",
    "_SyncObj__deleteEntriesFrom": "3b23c411bb903d365575a2783d536e04c23bcf11cb7ddffa763915b4efd3831b",
}


@pytest.mark.parametrize("name", sorted(FOLLOWER_APPEND_SOURCE_SHA256))
def test_syncobj_code_the_follower_append_override_replaces_is_unchanged(name):
    digest = hashlib.sha256(source(getattr(SyncObj, name)).encode()).hexdigest()
    assert digest == FOLLOWER_APPEND_SOURCE_SHA256[name], f"SyncObj.{name} changed: re-read follower_append.py"


def test_syncobj_append_entries_lines_the_override_relies_on():
    """The same dependency as the hashes, spelled out, so a failure says which assumption broke."""
    handler = source(SyncObj._SyncObj__onMessageReceived)
    in_order = [
        # Only current-or-newer terms reach the branch; the wrapper checks the same condition.
        "if message['type'] == 'append_entries' and message['term'] >= self.__raftCurrentTerm:",
        # A bare heartbeat (our case 4/5) still sets leader, term and follower state first.
        "self.__raftLeader = node",
        "self.__setState(_RAFT_STATE.FOLLOWER)",
        # The commit index we cap comes from this key and is kept as the leader's.
        "self.__leaderCommitIndex = leaderCommitIndex = message['commit_index']",
        "if 'prevLogIdx' in message:",
        # The chunked path, which the wrapper passes through unchanged.
        "transmission = message.get('transmission', None)",
        "prevEntries = self.__getEntries(prevLogIdx)",
        "if not prevEntries:",
        "if prevEntries[0][2] != prevLogTerm:",
        # The deletion the wrapper avoids: every entry after prevLogIdx, whenever the log has any.
        "if len(prevEntries) > 1:",
        "self.__deleteEntriesFrom(prevLogIdx + 1)",
        "for entry in newEntries:",
        "self.__raftLog.add(*entry)",
        # The acknowledgement: last entry + 1, or prevLogIdx + 1 without entries.
        "nextNodeIdx = prevLogIdx + 1",
        "nextNodeIdx = newEntries[-1][1] + 1",
        "self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)",
        # Neither prevLogIdx nor serialized: no log change, no answer (the bare heartbeat).
        "elif serialized is not None:",
        # The commit rule that is Raft's only while the log ends at the message's last entry.
        "self.__raftCommitIndex = min(leaderCommitIndex, self.__getCurrentLogIndex())",
        "self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)",
    ]
    position = 0
    for line in in_order:  # each found after the one before it
        assert line in handler[position:], line
        position = handler.index(line, position) + len(line)
    assert params(SyncObj._SyncObj__getEntries) == ["self", "fromIDx", "count", "maxSizeBytes"]
    assert params(SyncObj._SyncObj__sendNextNodeIdx) == ["self", "node", "reset", "nextNodeIdx", "success"]
    # The handler is registered through attribute lookup on self, so the subclass's runs.
    assert "self.__transport.setOnMessageReceivedCallback(self.__onMessageReceived)" in source(SyncObj.__init__)
    # Attributes present when __init__ ends are left out of SyncObj's own snapshot data: our
    # counters, set before super().__init__(), never enter a snapshot.
    assert "self.__properies.add(key)" in source(SyncObj.__init__)
    assert "if k not in self.__properies" in source(SyncObj._SyncObj__tryLogCompaction)
    init = source(SyncObj.__init__)
    for name in ("__raftCurrentTerm", "__raftCommitIndex", "__raftLastApplied", "__leaderCommitIndex"):
        assert f"self.{name} =" in init, name


def test_the_chunked_append_path_the_override_passes_through_is_never_taken():
    from queen_raft.raft.settings import APPEND_ENTRIES_BATCH_SIZE_BYTES, MAX_ENTRY_BYTES

    assert "if len(entries) == 1 and len(entries[0][0]) >= batchSizeBytes:" in source(SyncObj._SyncObj__sendAppendEntries)
    assert APPEND_ENTRIES_BATCH_SIZE_BYTES > MAX_ENTRY_BYTES


def test_follower_append_override_is_a_real_override_used_by_the_group():
    from queen_raft.raft import construction, group

    override = LogMatchingSyncObj._SyncObj__onMessageReceived
    assert override is not SyncObj._SyncObj__onMessageReceived
    assert params(override) == params(SyncObj._SyncObj__onMessageReceived) == ["self", "node", "message"]
    assert issubclass(CoalescingSyncObj, LogMatchingSyncObj)
    # quiet_messages.py wraps it (outermost) and hands every message on through super().
    assert CoalescingSyncObj._SyncObj__onMessageReceived is QuietMessagesSyncObj._SyncObj__onMessageReceived
    assert "super()._SyncObj__onMessageReceived(node, message)" in source(QuietMessagesSyncObj._SyncObj__onMessageReceived)
    assert QuietMessagesSyncObj.__mro__.index(LogMatchingSyncObj) > QuietMessagesSyncObj.__mro__.index(QuietMessagesSyncObj)
    assert "build_syncobj(" in source(group.TenantGroup.__init__)
    assert "SyncObj(" not in source(group.TenantGroup.__init__)
    assert issubclass(FollowerPollSyncObj, CoalescingSyncObj) and issubclass(StoredTermSyncObj, FollowerPollSyncObj)
    assert "StoredTermSyncObj(" in source(construction.build_syncobj)
    assert "SyncObj(" not in source(construction.build_syncobj).replace("StoredTermSyncObj(", "")


# -- SyncObj: a term or vote taken only once stored (stored_term.py) -------------------------------------

def test_syncobj_code_the_stored_term_relies_on():
    # The override replaces this whole method: memory first, then the store.
    assert source(SyncObj._SyncObj__setCurrentTerm).split("\n")[1:4] == [
        "        self.__raftCurrentTerm = term",
        "        self.__votedForNodeId = votedForNodeId",
        "        self.__raftLog.setCurrentTerm(term, votedForNodeId)",
    ]
    # Every term and vote goes through it; a raise leaves the message handler or the tick at once.
    handler, tick = source(SyncObj._SyncObj__onMessageReceived), source(SyncObj._onTick)
    assert "self.__raftCurrentTerm =" not in handler and "self.__votedForNodeId =" not in handler
    assert "self.__raftCurrentTerm =" not in tick and "self.__votedForNodeId =" not in tick
    assert handler.count("self.__setCurrentTerm(") == 3 and tick.count("self.__setCurrentTerm(") == 1
    # The election deadline moves on before the term an election would take is stored.
    assert tick.index("self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()") < tick.index(
        "self.__setCurrentTerm(self.__raftCurrentTerm + 1, self.__selfNode.id)")
    # Outermost: the raise of any layer below reaches the wrappers.
    assert StoredTermSyncObj._SyncObj__onMessageReceived is not QuietMessagesSyncObj._SyncObj__onMessageReceived
    assert "super()._SyncObj__onMessageReceived(node, message)" in source(StoredTermSyncObj._SyncObj__onMessageReceived)


# -- SyncObj: a follower's poll up to its election deadline (follower_poll.py) ---------------------------

def test_syncobj_code_the_follower_poll_relies_on():
    tick = source(SyncObj._onTick)
    # The election deadline is checked at the top of a tick, and the poll that ends it waits the
    # timeToWait it was given: a poll that ends at the deadline starts the election on the next tick.
    deadline = tick.index("if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():")
    assert deadline < tick.rindex("self._poller.poll(timeToWait)")
    assert tick.count("self._poller.poll(") == 1
    assert "self._onTick(self.__conf.autoTickPeriod)" in source(SyncObj._autoTickThread)
    # The group's tick goes through the override, which only changes how long the poll waits.
    assert FollowerPollSyncObj._onTick is not CoalescingSyncObj._onTick
    assert "super()._onTick(follower_poll_s(" in source(FollowerPollSyncObj._onTick)


# -- SyncObj: the leader's coalesced AppendEntries sends (leader_append.py) -----------------------------

def test_syncobj_code_the_leader_append_override_relies_on():
    check = source(SyncObj._checkCommandsToApply)
    # The per-command send we fold, right after the entry is added, and only without batching.
    add = check.index("self.__raftLog.add(command, idx, term)")
    send = check.index("if not self.__conf.appendEntriesUseBatch:\n                        self.__sendAppendEntries()")
    assert add < send
    assert check.count("self.__sendAppendEntries()") == 1
    assert params(SyncObj._checkCommandsToApply) == ["self"]
    assert params(SyncObj._SyncObj__sendAppendEntries) == ["self"]
    # The send carries every entry from each follower's nextIndex (so one send covers many adds).
    sender = source(SyncObj._SyncObj__sendAppendEntries)
    assert "entries = self.__getEntries(nextNodeIndex, None, batchSizeBytes)" in sender
    assert "while nextNodeIndex <= self.__getCurrentLogIndex() or sendSingle or sendingSerialized:" in sender
    assert CoalescingSyncObj._checkCommandsToApply is not SyncObj._checkCommandsToApply
    assert CoalescingSyncObj._SyncObj__sendAppendEntries is not SyncObj._SyncObj__sendAppendEntries


# -- SyncObj: messages that carry nothing new (quiet_messages.py) ----------------------------------------

# sha256 of inspect.getsource() of each SyncObj method QuietMessagesSyncObj overrides, wraps or whose
# behaviour its safety argument rests on, in 0.3.17; any change means re-reading quiet_messages.py.
QUIET_MESSAGES_SOURCE_SHA256 = {
    "_SyncObj__sendAppendEntries": "9cb9073128c392fa9e5efc4691420ba435bfafb4c74e83a34f931fa16aa760c6",
    "_onTick": "cc9eb08232d005ba4e21a33ec453e5d02fe3537dadebda8571406c57f65a3c37",
    "_SyncObj__onNodeConnected": "2655afb481b4c69b9b33d827d3ea1299c54785997d0762ced03e324a7754cf70",
    "_SyncObj__onNodeDisconnected": "a81c0475ba2218cc4732ab756b39e64ec22e8d9f3ff5987bc34649f9a2536c95",
    "_SyncObj__onBecomeLeader": "5a3fd97bc17dc1cf3070b007538b6a8d46adb71f0b6523f3922dc953420645e8",
    "_SyncObj__applyLogEntries": "073db677773b5a2dddf17cc51f84ac8803ed456da0f0011e15240d6bd1600684",
    "_SyncObj__sendNextNodeIdx": "68aaeefc267b8896bc1074280ac2aa014c3306d9f207949ed945569cef5d114c",
    "_SyncObj__onMessageReceived": "ddfe34b6c02821795146dc533fb7c0fcf6574a082a68a227b4c885c9e14be206",
}


@pytest.mark.parametrize("name", sorted(QUIET_MESSAGES_SOURCE_SHA256))
def test_syncobj_code_the_quiet_messages_rest_on_is_unchanged(name):
    digest = hashlib.sha256(source(getattr(SyncObj, name)).encode()).hexdigest()
    assert digest == QUIET_MESSAGES_SOURCE_SHA256[name], f"SyncObj.{name} changed: re-read quiet_messages.py"


def test_syncobj_lines_the_quiet_messages_rest_on():
    """The same dependency as the hashes, spelled out, so a failure says which assumption broke."""
    sender = source(SyncObj._SyncObj__sendAppendEntries)
    for line in (
        # Every send re-arms the heartbeat; a skipped one must not, so the heartbeat stays periodic.
        "self.__newAppendEntriesTime = monotonicTime() + self.__conf.appendEntriesPeriod",
        "for node in self.__otherNodes | self.__readonlyNodes:",
        # A follower not connected is sent nothing (its snapshot transmission cancelled).
        "if node not in self.__connectedNodes:",
        # At least one message to each connected follower, every one with this term and commit index.
        "while nextNodeIndex <= self.__getCurrentLogIndex() or sendSingle or sendingSerialized:",
        "'term': self.__raftCurrentTerm,\n                                'commit_index': self.__raftCommitIndex,",
        "'term': self.__raftCurrentTerm,\n                            'commit_index': self.__raftCommitIndex,",
        # A snapshot goes only while nextIndex is at or below the log's first index.
        "if nextNodeIndex > self.__raftLog[0][1]:",
        "transmissionData = self.__serializer.getTransmissionData(node)",
    ):
        assert line in sender, line
    assert sender.count("'commit_index': self.__raftCommitIndex,") == 3
    tick = source(SyncObj._onTick)
    # The periodic heartbeat and the post-apply send share one call site, told apart by the time.
    assert "if monotonicTime() > self.__newAppendEntriesTime or needSendAppendEntries:" in tick
    assert "if not self.__conf.appendEntriesUseBatch:\n                needSendAppendEntries = True" in source(SyncObj._SyncObj__applyLogEntries)
    # What the leader takes from an answer: nextIndex on a reset, matchIndex/nextIndex only upward
    # on a success, and the response time leaderFallbackTimeout reads.
    handler = source(SyncObj._SyncObj__onMessageReceived)
    answer = handler[handler.index("if message['type'] == 'next_node_idx':"):]
    for line in ("if reset:\n                    self.__raftNextIndex[node] = nextNodeIdx",
                 "if self.__raftMatchIndex[node] < currentNodeIdx:",
                 "self.__lastResponseTime[node] = monotonicTime()"):
        assert line in answer, line
    assert "deadline = monotonicTime() - self.__conf.leaderFallbackTimeout" in tick
    assert "if self.__lastResponseTime[node] > deadline:" in tick
    # An answer to an entry-less AppendEntries is prevLogIdx + 1; a missing or other-term prev is a reset.
    assert "self.__sendNextNodeIdx(node, success=False, reset=True)" in handler
    assert "self.__sendNextNodeIdx(node, nextNodeIdx = prevLogIdx, success = False, reset=True)" in handler
    # The link callbacks are looked up on self, so the overrides run.
    init = source(SyncObj.__init__)
    assert "self.__transport.setOnNodeConnectedCallback(self.__onNodeConnected)" in init
    assert "self.__transport.setOnNodeDisconnectedCallback(self.__onNodeDisconnected)" in init
    assert "self.__newAppendEntriesTime = 0" in init
    for name in ("_SyncObj__sendAppendEntries", "_SyncObj__sendNextNodeIdx", "_SyncObj__onMessageReceived",
                 "_SyncObj__onNodeConnected", "_SyncObj__onNodeDisconnected"):
        override = getattr(QuietMessagesSyncObj, name)
        assert override is not getattr(SyncObj, name), name
        assert params(override) == params(getattr(SyncObj, name)), name
    assert issubclass(CoalescingSyncObj, QuietMessagesSyncObj)


@pytest.mark.parametrize("name", ["_isLeader", "_getLeader", "forceLogCompaction", "destroy_synchronous", "waitBinded", "isNodeConnected"])
def test_syncobj_methods_we_call_exist(name):
    assert callable(getattr(SyncObj, name))


def test_syncobj_code_a_full_disk_relies_on():
    # GroupTransport._stand_aside: stepping down as pysyncobj does on leaderFallbackTimeout, and an
    # election deadline that the election check reads.
    tick = source(SyncObj._onTick)
    assert "self.__setState(_RAFT_STATE.FOLLOWER)\n                self.__raftLeader = None" in tick
    assert "if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():" in tick
    assert pysyncobj.syncobj._RAFT_STATE.FOLLOWER == 0 and pysyncobj.syncobj._RAFT_STATE.LEADER == 2
    assert params(SyncObj._SyncObj__setState) == ["self", "newState"]
    assert hasattr(pysyncobj.SyncObjConf(), "raftMaxTimeout") and isinstance(SyncObj.conf, property)
    # The once-a-second meta save the disk-full journal wraps, and the term store a new leader needs.
    assert "self.__metaStorer.storeMeta(self.__meta)" in source(pysyncobj.journal.FileJournal.onOneSecondTimer)
    assert "self.__raftLog.setCurrentTerm(term, votedForNodeId)" in source(SyncObj._SyncObj__setCurrentTerm)
    assert params(pysyncobj.journal.MetaStorer.getPath) == ["self"]
