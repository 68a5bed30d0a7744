"""The pysyncobj recipe: every private member we override or read still exists in the pinned version,
with the signature and behaviour we copied; and the overrides do what they are for.

If pysyncobj is upgraded and one of these fails, re-read the recipe against the new source before
changing the test.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import socket
import time

import pysyncobj
import pysyncobj.journal
import pysyncobj.monotonic
import pysyncobj.pickle
import pysyncobj.syncobj
import pysyncobj.tcp_server
import pysyncobj.transport
import pytest
from pysyncobj.poller import createPoller
from pysyncobj.serializer import Serializer
from pysyncobj.syncobj import SyncObj, SyncObjConsumer
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from queen_raft.raft import connection as connection_module
from queen_raft.raft.connection import FastTcpConnection, install_connection_recipe
from queen_raft.raft.follower_append import LogMatchingSyncObj
from queen_raft.raft.follower_poll import FollowerPollSyncObj
from queen_raft.raft.stored_term import StoredTermSyncObj
from queen_raft.raft.listener import ResilientTcpServer
from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.quiet_messages import QuietMessagesSyncObj
from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_factory import create_journal, install_journal_factory
from queen_raft.raft.transport import GroupTransport

PINNED_VERSION = "0.3.17"


def params(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def source(fn) -> str:
    return inspect.getsource(fn)


def test_pysyncobj_is_the_pinned_version():
    from pysyncobj.version import VERSION

    assert VERSION == PINNED_VERSION


# -- TcpConnection ----------------------------------------------------------------------------------

# sha256 of inspect.getsource(TcpConnection.__processRead) in 0.3.17, which FastTcpConnection replaces.
STOCK_PROCESS_READ_SHA256 = "002c11f3c6f60907a12c9e402930e5e33bda022686475534bdcee04ee5570b67"


def test_tcp_connection_private_members_we_override_exist():
    assert params(TcpConnection.send) == ["self", "message"]
    assert params(TcpConnection.connect) == ["self", "host", "port"]
    assert params(TcpConnection.disconnect) == ["self"]
    assert params(TcpConnection._TcpConnection__processSend) == ["self"]
    assert params(TcpConnection._TcpConnection__processParseMessage) == ["self"]
    assert params(TcpConnection._TcpConnection__trySendBuffer) == ["self"]
    assert params(TcpConnection._TcpConnection__processConnection) == ["self", "descr", "eventType"]
    # The stock code we replace: slicing copies, level-3 zlib, no WRITE re-arm in send.
    assert "self.__writeBuffer = self.__writeBuffer[res:]" in source(TcpConnection._TcpConnection__processSend)
    assert "self.__readBuffer = self.__readBuffer[4 + l:]" in source(TcpConnection._TcpConnection__processParseMessage)
    assert "zlib.compress(pickle.dumps(message), 3)" in source(TcpConnection.send)
    # Receiving still appends with += (works in place on a bytearray) and decompresses with zlib.
    assert "self.__readBuffer += incoming" in source(TcpConnection._TcpConnection__processRead)
    # FastTcpConnection replaces the read (in chunks, ending the read event's loop after a short
    # recv): the loop is this one, the read is stock's below, and the READ event of the
    # level-triggered poll calls the loop.
    assert params(TcpConnection._TcpConnection__tryReadBuffer) == ["self"]
    assert params(TcpConnection._TcpConnection__processRead) == ["self"]
    assert "while self.__processRead():" in source(TcpConnection._TcpConnection__tryReadBuffer)
    assert "self.__tryReadBuffer()" in source(TcpConnection._TcpConnection__processConnection)
    assert hashlib.sha256(source(TcpConnection._TcpConnection__processRead).encode()).hexdigest() == (
        STOCK_PROCESS_READ_SHA256), "TcpConnection.__processRead changed: re-read connection.py"
    assert "zlib.decompress(data)" in source(TcpConnection._TcpConnection__processParseMessage)


def test_the_handshake_sets_the_random_keys_the_aead_negotiation_reads():
    # connection.py's recvRandKey/sendRandKey properties add the AEAD offer and read the peer's:
    # the transport must set them as attributes, and disconnect must clear them.
    outgoing = source(TCPTransport._onOutgoingConnected)
    assert "conn.recvRandKey = os.urandom(32)" in outgoing and "conn.send(conn.recvRandKey)" in outgoing
    assert "conn.sendRandKey = message" in source(TCPTransport._onOutgoingMessageReceived)
    incoming = source(TCPTransport._onIncomingMessageReceived)
    assert "conn.sendRandKey = message" in incoming and "conn.recvRandKey = os.urandom(32)" in incoming
    disconnect = source(TcpConnection.disconnect)
    assert "self.sendRandKey = None" in disconnect and "self.recvRandKey = None" in disconnect


def test_tcp_connection_private_attributes_exist_after_init():
    poller = createPoller("auto")
    conn = TcpConnection(poller)
    for name in ("__readBuffer", "__writeBuffer", "__poller", "__socket", "__fileno", "__state"):
        assert hasattr(conn, "_TcpConnection" + name), name
    fast = FastTcpConnection(poller)
    assert isinstance(fast._TcpConnection__readBuffer, bytearray)
    assert isinstance(fast._TcpConnection__writeBuffer, bytearray)


def test_recipe_installs_fast_connection_and_pickle_protocol_4():
    install_connection_recipe()
    assert "__protocol" in vars(pysyncobj.pickle)
    assert pysyncobj.transport.TcpConnection is FastTcpConnection
    assert pysyncobj.tcp_server.TcpConnection is FastTcpConnection
    assert pysyncobj.transport.TcpServer is ResilientTcpServer
    assert connection_module.connection_recipe_installed()
    # Protocol 4 keeps bytes as bytes (protocol 2 turns them into a 1.5x latin-1 str).
    dumped = pysyncobj.pickle.dumps(b"\xff" * 100)
    assert dumped[:2] == b"\x80\x04"
    assert len(dumped) < 120
    assert pickle.loads(dumped) == b"\xff" * 100


def pump(poller, until, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "poller never delivered"
        poller.poll(0.01)


def test_fast_connection_moves_a_large_message_without_another_send():
    """A 6 MiB message does not fit the socket buffers: the stock code would leave the rest until
    the next send; with WRITE re-armed the poller alone delivers it, and buffers stay bytearrays."""
    install_connection_recipe()
    poller = createPoller("auto")
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received = []
    sender = FastTcpConnection(poller, socket=left, recvBufferSize=1 << 16)
    receiver = FastTcpConnection(poller, socket=right, onMessageReceived=received.append, recvBufferSize=1 << 16)
    # Incompressible, so that stock zlib level 3 would not shrink it under the buffer sizes either.
    message = {"type": "append_entries", "entries": [(b"\x01" + os.urandom(6 * 1024 * 1024), 7, 1)]}
    # Idle polls first: a WRITE event with nothing to send drops WRITE interest, as on a live link.
    for _ in range(3):
        poller.poll(0.01)
    sender.send(message)
    assert sender.getSendBufferSize() > 0, "the test needs a message larger than the socket buffers"
    pump(poller, lambda: received)
    assert received == [message]
    assert sender.getSendBufferSize() == 0
    assert isinstance(sender._TcpConnection__writeBuffer, bytearray)
    assert isinstance(receiver._TcpConnection__readBuffer, bytearray)
    assert sender.state == CONNECTION_STATE.CONNECTED and receiver.state == CONNECTION_STATE.CONNECTED
    # Frames are zlib level 0 ("stored"): readable by stock nodes, never recompressed.
    sender.disconnect()
    receiver.disconnect()
    assert isinstance(sender._TcpConnection__writeBuffer, bytearray)


def test_fast_connection_drops_a_corrupt_frame_like_stock():
    poller = createPoller("auto")
    left, right = socket.socketpair()
    right.setblocking(False)
    disconnected = []
    receiver = FastTcpConnection(poller, socket=right, onDisconnected=lambda: disconnected.append(True))
    left.sendall(len(b"garbage").to_bytes(4, "little", signed=True) + b"garbage")
    pump(poller, lambda: disconnected)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED
    left.close()


# -- TCPTransport ----------------------------------------------------------------------------------

def test_transport_members_we_override_exist_with_the_copied_body():
    assert params(TCPTransport._connectIfNecessarySingle) == ["self", "node"]
    assert params(TCPTransport._onIncomingMessageReceived) == ["self", "conn", "message"]
    assert params(TCPTransport.send) == ["self", "node", "message"]
    assert params(TCPTransport._onTick) == ["self"]
    assert params(TCPTransport._onNewIncomingConnection) == ["self", "conn"]
    assert params(TCPTransport._onDisconnected) == ["self", "conn"]
    assert params(TCPTransport.__init__) == ["self", "syncObj", "selfNode", "otherNodes"]
    # An inbound connection waits in _unknownConnections until it names its node; the handshake
    # deadline and the utility-command refusal rely on it.
    assert "self._unknownConnections.add(conn)" in source(TCPTransport._onNewIncomingConnection)
    assert "functools.partial(self._onDisconnected, conn)" in source(TCPTransport._onNewIncomingConnection)
    assert "self._unknownConnections.discard(conn)" in source(TCPTransport._onIncomingMessageReceived)
    assert "self.__socket.recv(self.__recvBufferSize)" in source(TcpConnection._TcpConnection__processRead)
    assert "while self.__processRead():" in source(TcpConnection._TcpConnection__tryReadBuffer)
    body = source(TCPTransport._connectIfNecessarySingle)
    # Our override is this body with the dial target replaced.
    for line in (
        "if node in self._connections and self._connections[node].state != CONNECTION_STATE.DISCONNECTED:",
        "if not self._shouldConnect(node):",
        "monotonicTime() - self._lastConnectAttempt[node] < self._syncObj.conf.connectionRetryTime",
        "self._lastConnectAttempt[node] = monotonicTime()",
        "return self._connections[node].connect(node.ip, node.port)",
    ):
        assert line in body, line
    incoming = source(TCPTransport._onIncomingMessageReceived)
    assert "node = self._nodeAddrToNode[message] if message in self._nodeAddrToNode else None" in incoming
    assert "self._onUtilityMessage(conn, message)" in incoming
    # The transport registers its _onTick as a tick callback (looked up on self: our override runs).
    assert "self._syncObj.addOnTickCallback(self._onTick)" in source(TCPTransport.__init__)


def test_transport_attributes_we_read_are_set_in_init():
    init = source(TCPTransport.__init__)
    for name in ("self._connections", "self._unknownConnections", "self._nodes", "self._lastConnectAttempt", "self._syncObj"):
        assert name + " =" in init, name
    assert "self._onUtilityMessageCallbacks = {}" in source(pysyncobj.transport.Transport.__init__)
    assert "TcpConnection(" in source(TCPTransport.addNode)  # looked up in the module: the install works


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


def test_group_transport_overrides_are_real_overrides():
    for name in ("_connectIfNecessarySingle", "_onNewIncomingConnection", "_onIncomingMessageReceived",
                 "_onDisconnected", "send", "_onTick"):
        assert getattr(GroupTransport, name) is not getattr(TCPTransport, name), name
        assert params(getattr(GroupTransport, name)) == params(getattr(TCPTransport, name)), name
    for name in ("_TcpConnection__processSend", "_TcpConnection__processParseMessage", "_TcpConnection__processRead",
                 "send", "connect", "disconnect"):
        assert getattr(FastTcpConnection, name) is not getattr(TcpConnection, name), name
    assert issubclass(GroupCommitJournal, CompactionGuardedJournal)


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


def test_tcp_server_members_the_resilient_listener_reads_exist():
    server = pysyncobj.tcp_server.TcpServer(createPoller("auto"), "127.0.0.1", 0, onNewConnection=print)
    for name in ("__socket", "__poller", "__fileno", "__state", "__sendBufferSize", "__recvBufferSize",
                 "__connectionTimeout", "__keepalive", "__onNewConnectionCallback"):
        assert hasattr(server, "_TcpServer" + name), name
    assert params(pysyncobj.tcp_server.TcpServer._TcpServer__onNewConnection) == ["self", "descr", "event"]
    # bind() subscribes the (overridden) accept callback; the transport builds the module's TcpServer
    # and binds only while not _ready (the flag the listener's rebind clears).
    assert "self.__onNewConnection" in source(pysyncobj.tcp_server.TcpServer.bind)
    assert "self._server = TcpServer(" in source(TCPTransport._createServer)
    assert "if self._ready or" in source(TCPTransport._maybeBind)
    # The stock accept error handling this replaces: any error but EAGAIN unbinds, for good.
    assert "self.unbind()" in source(pysyncobj.tcp_server.TcpServer._TcpServer__onNewConnection)
