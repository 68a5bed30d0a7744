"""The pysyncobj recipe, the wire (see recipe_source.py for what the recipe tests are for): the
members of TcpConnection, TCPTransport and TcpServer that connection.py, transport.py and
listener.py override or read, and what FastTcpConnection does on a socket pair."""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import time

import pysyncobj
import pysyncobj.pickle
import pysyncobj.tcp_server
import pysyncobj.transport
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from queen_raft.raft import connection as connection_module
from queen_raft.raft.connection import FastTcpConnection, install_connection_recipe
from queen_raft.raft.listener import ResilientTcpServer
from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.transport import GroupTransport

from recipe_source import PINNED_VERSION, params, source


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


def test_group_transport_overrides_are_real_overrides():
    for name in ("_connectIfNecessarySingle", "_onNewIncomingConnection", "_onIncomingMessageReceived",
                 "_onDisconnected", "send", "_onTick"):
        assert getattr(GroupTransport, name) is not getattr(TCPTransport, name), name
        assert params(getattr(GroupTransport, name)) == params(getattr(TCPTransport, name)), name
    for name in ("_TcpConnection__processSend", "_TcpConnection__processParseMessage", "_TcpConnection__processRead",
                 "send", "connect", "disconnect"):
        assert getattr(FastTcpConnection, name) is not getattr(TcpConnection, name), name
    assert issubclass(GroupCommitJournal, CompactionGuardedJournal)


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
