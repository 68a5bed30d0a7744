"""pysyncobj's peer connection, fixed for large entries.

Stock TcpConnection stalls a partly sent buffer until the next heartbeat, compresses at zlib level
3 once per follower, pickles bytes with protocol 2 (1.5x on the wire) and grows/shrinks `bytes`
buffers by copying (quadratic in a backlog). Together: a 1 MiB entry took ~2 s and bursts caused
elections. This subclass fixes each cause and stays wire-compatible with stock nodes (the receiver
still zlib-decompresses and unpickles).

It also bounds what a connection buffers: with a password, a frame may announce at most
MAX_HANDSHAKE_FRAME_BYTES until one frame has been decrypted (so the sender knows the password), and
MAX_PEER_FRAME_BYTES after. A frame announcing more closes the connection when its header arrives,
before its body is buffered, and nothing is unpickled before its Fernet signature checked out.

With a password, a connection whose peer offered it in the handshake sends the AEAD frame of
peer_frame.py instead of Fernet (the frame, its keys and the negotiation are described there); it
reads both kinds, so a node of an older version and this one still talk (Fernet both ways).

It overrides private, name-mangled members of pysyncobj 0.3.17's TcpConnection;
tests/unit/test_raft_recipe_wire.py fails if those members change.
"""

from __future__ import annotations

import base64
import itertools
import socket
import struct
import zlib

import pysyncobj.pickle
import pysyncobj.tcp_connection
import pysyncobj.tcp_server
import pysyncobj.transport
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from queen_raft.raft import peer_frame
from queen_raft.raft.listener import ResilientTcpServer
from queen_raft.raft.settings import MAX_HANDSHAKE_FRAME_BYTES, MAX_PEER_FRAME_BYTES

# zlib level 0 is "stored": the frame stays valid for stock receivers, at 1.6 ms/MiB instead of
# 53 ms/MiB per follower. Our payloads are zstd or small; level 3 bought nothing.
WIRE_ZLIB_LEVEL = 0
# Protocol 4 pickles bytes as bytes (protocol 2 makes a 1 MiB argument a 1.5 MiB latin-1 str).
WIRE_PICKLE_PROTOCOL = 4
# What a recv asks for when no frame is under way (or what one lacks is less): under glibc's mmap
# threshold (128 KiB), so the usual message's buffer comes from the heap without a system call. A
# frame under way asks for what it lacks, up to the socket buffer (__processRead).
READ_CHUNK_BYTES = 64 * 1024
_FRAME_HEADER = struct.Struct("i")  # pysyncobj's frame: native-endian signed length
# A Fernet token is URL-safe base64 of version (1 byte) | timestamp (8, big-endian) | IV | ...;
# its first 12 characters decode to exactly the version and the timestamp.
_FERNET_HEAD_CHARS = 12
_FERNET_TIMESTAMP = struct.Struct(">Q")


def fernet_timestamp(token: bytes) -> int:
    """The timestamp of a Fernet token (as Fernet.extract_timestamp, without checking the HMAC:
    call it on a token that decrypt() accepted)."""
    return _FERNET_TIMESTAMP.unpack_from(base64.urlsafe_b64decode(token[:_FERNET_HEAD_CHARS]), 1)[0]


class FastTcpConnection(TcpConnection):
    # By every connection of the process: frames refused for their announced length, and frames
    # dropped because they did not decrypt (another password, or none), decompress or unpickle.
    frames_refused = 0
    frames_dropped = 0

    def __init__(self, *args, **kwargs):
        # Before super().__init__(): an accepted socket is subscribed to the poller there, and the
        # stock __init__ sets the random keys through the properties below.
        self.peer_proven = False  # a whole frame was read (and, with a password, decrypted)
        # The transport sets the AEAD master key (peer_frame.master_key) on a connection of a node
        # that reads AEAD frames; None: Fernet only, as a node of an older version.
        self.frame_master: bytes | None = None
        self._reset_aead()
        super().__init__(*args, **kwargs)
        self._TcpConnection__readBuffer = bytearray()
        self._TcpConnection__writeBuffer = bytearray()

    def connect(self, host, port):
        # The stock connect resets both buffers to bytes() before dialling; nothing is queued yet.
        result = super().connect(host, port)
        self._use_bytearray_buffers()
        return result

    def disconnect(self):
        super().disconnect()  # clears both random keys, and with them the AEAD state
        self.peer_proven = False
        self._use_bytearray_buffers()

    # -- the handshake's random keys, and the AEAD frame they negotiate (peer_frame.py) -----------
    # pysyncobj's transport sets both keys during the handshake (recvRandKey: the one this end makes
    # and sends; sendRandKey: the peer's) and clears them on disconnect.

    def _reset_aead(self) -> None:
        # A new or closed connection: no keys, nothing negotiated, no frame counted.
        self._recv_rand_key = self._send_rand_key = None
        self.peer_reads_aead = False  # the peer's key offered AEAD frames: send them, and only accept them
        self._send_cipher = self._recv_cipher = None
        # The next frame's position, its nonce: next() on a count cannot hand one position out
        # twice, even to two threads (a nonce used twice under one key breaks GCM).
        self._send_positions = itertools.count()
        self.aead_frames_sent = self.aead_frames_received = 0

    @property
    def recvRandKey(self):
        return self._recv_rand_key

    @recvRandKey.setter
    def recvRandKey(self, key):
        if key is None:
            self._reset_aead()
            return
        if self.frame_master is not None:
            key = key + peer_frame.AEAD_OFFER  # the peer wraps and compares the key whole
        self._recv_rand_key = key
        self._send_cipher = self._recv_cipher = None

    @property
    def sendRandKey(self):
        return self._send_rand_key

    @sendRandKey.setter
    def sendRandKey(self, key):
        if key is None:
            self._reset_aead()
            return
        self._send_rand_key = key
        self.peer_reads_aead = self.frame_master is not None and peer_frame.offers_aead(key)
        self._send_cipher = self._recv_cipher = None

    def _seal(self, message) -> bytes:
        cipher = self._send_cipher
        if cipher is None:
            cipher = self._send_cipher = peer_frame.direction_cipher(
                self.frame_master, self._send_rand_key, self._recv_rand_key)
        position = next(self._send_positions)
        self.aead_frames_sent = position + 1
        return peer_frame.seal(cipher, position, message)

    def _open(self, body):
        if self._recv_rand_key is None or not self.peer_reads_aead:
            raise peer_frame.FrameRejected("an AEAD frame before the handshake offered it")
        cipher = self._recv_cipher
        if cipher is None:
            cipher = self._recv_cipher = peer_frame.direction_cipher(
                self.frame_master, self._recv_rand_key, self._send_rand_key)
        message = peer_frame.open_frame(cipher, self.aead_frames_received, body)
        self.aead_frames_received += 1
        return message

    def _use_bytearray_buffers(self) -> None:
        # Convert only what the stock code replaced with bytes(): a reconnect made from inside the
        # disconnect callback may already hold bytearrays.
        if not isinstance(self._TcpConnection__readBuffer, bytearray):
            self._TcpConnection__readBuffer = bytearray(self._TcpConnection__readBuffer)
        if not isinstance(self._TcpConnection__writeBuffer, bytearray):
            self._TcpConnection__writeBuffer = bytearray(self._TcpConnection__writeBuffer)

    def send(self, message):
        if self.peer_reads_aead and type(message) is not bytes:
            # A random key (bytes) still goes as Fernet: the peer needs it to derive the AEAD keys.
            data = self._seal(message)
        else:
            if self._send_rand_key:
                message = (self._send_rand_key, message)
            data = zlib.compress(pysyncobj.pickle.dumps(message), WIRE_ZLIB_LEVEL)
            if self.encryptor:
                data = self.encryptor.encrypt_at_time(data, int(monotonic_time()))
        write_buffer = self._TcpConnection__writeBuffer
        write_buffer += _FRAME_HEADER.pack(len(data))
        write_buffer += data
        self._TcpConnection__trySendBuffer()
        # The stock send leaves what the kernel did not take in the buffer without asking the
        # poller for WRITE, so the rest waited for the next heartbeat (~100 ms). Re-arm WRITE.
        fileno = self._TcpConnection__fileno
        if self._TcpConnection__writeBuffer and fileno is not None and self.state != CONNECTION_STATE.DISCONNECTED:
            self._TcpConnection__poller.subscribe(
                fileno,
                self._TcpConnection__processConnection,
                POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.WRITE | POLL_EVENT_TYPE.ERROR,
            )

    def _TcpConnection__processSend(self):
        write_buffer = self._TcpConnection__writeBuffer
        if not write_buffer:
            return False
        try:
            sent = self._TcpConnection__socket.send(write_buffer)
        except socket.error as e:
            if e.errno not in (socket.errno.EAGAIN, socket.errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sent < 0:
            self.disconnect()
            return False
        if sent == 0:
            return False
        del write_buffer[:sent]  # in place: no copy of the rest of the backlog
        return True

    def frame_limit(self) -> int:
        # Without a password nothing is proven by a frame, and a dialer's first frame from the
        # peer may be an append_entries: only a connection with a password has a handshake to cap.
        if self.peer_proven or self.encryptor is None:
            return MAX_PEER_FRAME_BYTES
        return MAX_HANDSHAKE_FRAME_BYTES

    def _first_frame_refused(self) -> bool:
        """The frame at the head of the read buffer announces a length we never accept."""
        read_buffer = self._TcpConnection__readBuffer
        if len(read_buffer) < _FRAME_HEADER.size:
            return False
        length = _FRAME_HEADER.unpack_from(read_buffer, 0)[0]
        return length < 0 or length > self.frame_limit()

    def _refuse_frame(self) -> None:
        FastTcpConnection.frames_refused += 1
        self.disconnect()

    # Whether this read event's last recv returned less than it asked for (see __processRead).
    _drained = False

    def _TcpConnection__tryReadBuffer(self):
        self._drained = False
        super()._TcpConnection__tryReadBuffer()

    def _TcpConnection__processRead(self):
        """Stock's read (recv, SO_ERROR, EOF: disconnect), asking READ_CHUNK_BYTES or what the frame
        under way lacks, and ending the read event's loop at a short recv.

        The stock loop recvs recvBufferSize (the 4 MiB socket buffer) until EAGAIN: each read event
        allocated 4 MiB twice and raised and caught an exception in its last recv, for a message of
        a few hundred bytes. A chunk under glibc's mmap threshold comes from the heap, and a recv
        shorter than asked took what the socket held; the poll is level-triggered, so bytes that
        arrive after it are reported by the next poll, which then does not wait."""
        if self._drained:
            return False
        read_buffer = self._TcpConnection__readBuffer
        if len(read_buffer) > self.frame_limit() + _FRAME_HEADER.size:
            # A whole frame is buffered: parse it before reading more (the poll is level-triggered,
            # so what is left in the socket is reported again).
            return False
        sock = self._TcpConnection__socket
        chunk = READ_CHUNK_BYTES
        if len(read_buffer) >= _FRAME_HEADER.size:
            # A frame under way asks for all it still lacks at once: a drain's tick entry of a few
            # MiB in 64 KiB recvs costs dozens of recvs and polls, each a pass of the tick loop.
            # Never past this link's frame cap: a header over it is refused once read.
            length = min(_FRAME_HEADER.unpack_from(read_buffer, 0)[0], self.frame_limit())
            chunk = max(chunk, length + _FRAME_HEADER.size - len(read_buffer))
        chunk = min(chunk, self._TcpConnection__recvBufferSize)
        try:
            incoming = sock.recv(chunk)
        except socket.error as e:
            if e.errno not in (socket.errno.EAGAIN, socket.errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or not incoming:
            self.disconnect()
            return False
        read_buffer += incoming
        self._drained = len(incoming) < chunk
        if self._first_frame_refused():
            self._refuse_frame()
            return False
        return True

    def _TcpConnection__processParseMessage(self):
        read_buffer = self._TcpConnection__readBuffer
        if len(read_buffer) < 4:
            return None
        if self._first_frame_refused():
            self._refuse_frame()
            return None
        length = _FRAME_HEADER.unpack_from(read_buffer, 0)[0]
        if len(read_buffer) - 4 < length:
            return None
        data = bytes(read_buffer[4 : 4 + length])
        try:
            if self.peer_reads_aead or (self.frame_master is not None and data[:1] == peer_frame.AEAD_FRAME_KIND_BYTE):
                # After the peer's key offered AEAD frames, it sends nothing else (peer_frame.py).
                message = self._open(data)
            else:
                message = self._open_fernet(data)
        except Exception:
            # As stock: a frame that does not decrypt, decompress or unpickle drops the connection.
            FastTcpConnection.frames_dropped += 1
            self.disconnect()
            return None
        del read_buffer[: 4 + length]
        self.peer_proven = True
        return message

    def _open_fernet(self, data: bytes):
        if self.encryptor:
            # decrypt() checks the HMAC over the whole token first: a frame not made with the
            # password is dropped here, before decompression or unpickling. Stock code also
            # called extract_timestamp(), which checks the same HMAC again (a third of the
            # receive cost of a large frame); the timestamp is read from the checked token.
            token = data
            data = self.encryptor.decrypt(token)
            data_timestamp = fernet_timestamp(token)
            # Explicit checks, not stock's asserts: replay protection must hold under python -O.
            if data_timestamp < self.recvLastTimestamp:
                raise ValueError("a frame older than the last one")
            self.recvLastTimestamp = data_timestamp
        message = pysyncobj.pickle.loads(zlib.decompress(data))
        if self._recv_rand_key:
            rand_key, message = message
            if rand_key != self._recv_rand_key:
                raise ValueError("a frame of another connection")
        return message


def install_connection_recipe() -> None:
    """Make every pysyncobj connection in this process a FastTcpConnection, pickling protocol 4,
    and every Raft port listener a ResilientTcpServer (listener.py).

    Process-wide on purpose: all groups of a node run the same wire code, and it is
    wire-compatible with stock nodes. Idempotent.
    """
    vars(pysyncobj.pickle)["__protocol"] = WIRE_PICKLE_PROTOCOL
    pysyncobj.transport.TcpConnection = FastTcpConnection
    pysyncobj.tcp_server.TcpConnection = FastTcpConnection
    pysyncobj.transport.TcpServer = ResilientTcpServer


def connection_recipe_installed() -> bool:
    return (
        vars(pysyncobj.pickle).get("__protocol") == WIRE_PICKLE_PROTOCOL
        and pysyncobj.transport.TcpConnection is FastTcpConnection
        and pysyncobj.tcp_server.TcpConnection is FastTcpConnection
        and pysyncobj.transport.TcpServer is ResilientTcpServer
    )


# The stock class, kept before anything is installed, for tests that compare against it.
STOCK_TCP_CONNECTION = pysyncobj.tcp_connection.TcpConnection
