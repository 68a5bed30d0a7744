"""FastTcpConnection's guards on what it receives, over a socketpair: frame caps checked at the
header, and frames of another connection or password dropped before anything is unpickled."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
import zlib

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE

from queen_raft.raft.connection import READ_CHUNK_BYTES, FastTcpConnection
from queen_raft.raft.settings import MAX_HANDSHAKE_FRAME_BYTES, MAX_PEER_FRAME_BYTES

POLLS = 50
POLL_TIMEOUT_S = 0.01


class Gadget:
    unpickled = 0

    def __reduce__(self):
        return (Gadget._mark, ())

    @staticmethod
    def _mark():
        Gadget.unpickled += 1
        return "marked"


@pytest.fixture
def pair():
    poller = createPoller("auto")
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    receiver = FastTcpConnection(poller, socket=right, onMessageReceived=received.append, timeout=60)
    receiver.encryptor = getEncryptor("cluster password")
    yield poller, left, receiver, received
    left.close()
    receiver.disconnect()


def pump(poller, receiver, until) -> None:
    for _ in range(POLLS):
        poller.poll(POLL_TIMEOUT_S)
        if until() or receiver.state == CONNECTION_STATE.DISCONNECTED:
            return


def frame(fernet, message) -> bytes:
    token = fernet.encrypt_at_time(zlib.compress(pickle.dumps(message, protocol=4)), int(time.monotonic()))
    return struct.pack("i", len(token)) + token


def test_a_header_past_the_handshake_cap_closes_before_the_body(pair):
    poller, sender, receiver, received = pair
    refused = FastTcpConnection.frames_refused
    sender.sendall(struct.pack("i", MAX_HANDSHAKE_FRAME_BYTES + 1) + b"\0" * 1024)
    pump(poller, receiver, lambda: False)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED
    assert FastTcpConnection.frames_refused == refused + 1 and received == []


def test_a_negative_length_is_refused(pair):
    poller, sender, receiver, _ = pair
    sender.sendall(struct.pack("i", -5))
    pump(poller, receiver, lambda: False)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED


def test_after_a_decrypted_frame_the_peer_cap_applies(pair):
    poller, sender, receiver, received = pair
    sender.sendall(frame(getEncryptor("cluster password"), os.urandom(32)))
    pump(poller, receiver, lambda: received)
    assert receiver.peer_proven and receiver.frame_limit() == MAX_PEER_FRAME_BYTES
    sender.sendall(struct.pack("i", MAX_HANDSHAKE_FRAME_BYTES + 1) + b"\0" * 1024)
    pump(poller, receiver, lambda: False)
    assert receiver.state == CONNECTION_STATE.CONNECTED  # a large frame, still arriving


def test_a_header_past_the_peer_cap_closes_a_proven_connection(pair):
    poller, sender, receiver, _ = pair
    receiver.peer_proven = True
    refused = FastTcpConnection.frames_refused
    sender.sendall(struct.pack("i", MAX_PEER_FRAME_BYTES + 1))
    pump(poller, receiver, lambda: False)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED and FastTcpConnection.frames_refused == refused + 1


def test_a_frame_with_another_password_is_never_unpickled(pair):
    poller, sender, receiver, received = pair
    before, dropped = Gadget.unpickled, FastTcpConnection.frames_dropped
    sender.sendall(frame(getEncryptor("another password"), Gadget()))
    pump(poller, receiver, lambda: received)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED
    assert Gadget.unpickled == before and received == [] and FastTcpConnection.frames_dropped == dropped + 1


def test_a_frame_of_another_connection_is_dropped(pair):
    poller, sender, receiver, received = pair
    fernet = getEncryptor("cluster password")
    receiver.recvRandKey = os.urandom(32)
    sender.sendall(frame(fernet, (os.urandom(32), "a message replayed from another connection")))
    pump(poller, receiver, lambda: received)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED and received == []


def test_a_frame_older_than_the_last_is_dropped(pair):
    poller, sender, receiver, received = pair
    fernet = getEncryptor("cluster password")
    newer = fernet.encrypt_at_time(zlib.compress(pickle.dumps("newer", protocol=4)), 1000)
    older = fernet.encrypt_at_time(zlib.compress(pickle.dumps("older", protocol=4)), 999)
    sender.sendall(struct.pack("i", len(newer)) + newer + struct.pack("i", len(older)) + older)
    pump(poller, receiver, lambda: len(received) > 1)
    assert received == ["newer"] and receiver.state == CONNECTION_STATE.DISCONNECTED


def test_a_read_event_stops_at_a_short_recv_and_the_rest_comes_at_the_next_poll(pair, monkeypatch):
    """One recv per read event when it returns less than asked (the stock loop recvs again until
    EAGAIN), of READ_CHUNK_BYTES while no frame is under way, then of what the frame under way lacks;
    bytes that arrive after it are read at the next poll, and nothing is lost."""
    poller, sender, receiver, received = pair
    receiver._TcpConnection__recvBufferSize = 4 * 1024 * 1024  # the group's socket buffers
    receiver.peer_proven = True
    receiver.encryptor = None  # plain frames: this test is about the reads, not the frames
    sock = receiver._TcpConnection__socket
    recvs, got = [], []  # what each recv asked for, and what it returned
    real_recv = sock.recv

    class CountingSocket:
        def __getattr__(self, name):
            return getattr(sock, name)

        def recv(self, size):
            recvs.append(size)  # every call, also one that finds nothing and raises EAGAIN
            incoming = real_recv(size)
            got.append(len(incoming))
            return incoming

    monkeypatch.setattr(receiver, "_TcpConnection__socket", CountingSocket())

    def plain(message) -> bytes:
        body = zlib.compress(pickle.dumps(message, protocol=4))
        return struct.pack("i", len(body)) + body

    sender.sendall(plain("first"))
    pump(poller, receiver, lambda: received)
    assert received == ["first"] and len(recvs) == 1
    sender.sendall(plain("second") + plain("third"))
    pump(poller, receiver, lambda: len(received) == 3)
    assert received == ["first", "second", "third"] and len(recvs) == 2
    big = os.urandom(3 * READ_CHUNK_BYTES)  # more than one recv holds
    sender.setblocking(True)
    sender.settimeout(10)
    feeder = threading.Thread(target=sender.sendall, args=(plain(big),))
    feeder.start()
    pump(poller, receiver, lambda: len(received) == 4)
    feeder.join(10)
    assert received[3] == big and receiver.state == CONNECTION_STATE.CONNECTED
    assert recvs[:3] == [READ_CHUNK_BYTES] * 3
    frame_bytes, read = len(plain(big)), got[2]  # the big frame's first recv took its header
    for asked, returned in zip(recvs[3:], got[3:]):
        assert asked == frame_bytes - read  # the rest of the frame, in one recv when it is there
        read += returned
    assert read == frame_bytes


def counted_recvs(receiver, monkeypatch) -> list:
    """What each recv of the receiver asks for, from now on."""
    sizes = []
    sock = receiver._TcpConnection__socket
    real_recv = sock.recv

    class CountingSocket:
        def __getattr__(self, name):
            return getattr(sock, name)

        def recv(self, size):
            sizes.append(size)
            return real_recv(size)

    monkeypatch.setattr(receiver, "_TcpConnection__socket", CountingSocket())
    return sizes


def test_an_unproven_frame_under_way_asks_no_more_than_the_handshake_cap(pair, monkeypatch):
    poller, sender, receiver, received = pair  # a password, no frame decrypted yet
    sizes = counted_recvs(receiver, monkeypatch)
    sender.sendall(struct.pack("i", 2**31 - 1) + b"x" * 100)  # refused once read
    pump(poller, receiver, lambda: False)
    assert receiver.state == CONNECTION_STATE.DISCONNECTED
    assert max(sizes) <= max(READ_CHUNK_BYTES, MAX_HANDSHAKE_FRAME_BYTES + 4)


def test_a_frame_under_way_asks_at_most_the_socket_buffer(pair, monkeypatch):
    poller, sender, receiver, received = pair
    receiver._TcpConnection__recvBufferSize = 128 * 1024
    receiver.peer_proven, receiver.encryptor = True, None
    sizes = counted_recvs(receiver, monkeypatch)
    body = zlib.compress(pickle.dumps(os.urandom(1024 * 1024), protocol=4))
    sender.setblocking(True)
    sender.settimeout(10)
    feeder = threading.Thread(target=sender.sendall, args=(struct.pack("i", len(body)) + body,))
    feeder.start()
    pump(poller, receiver, lambda: len(received) == 1)
    feeder.join(10)
    assert len(received) == 1 and max(sizes) == 128 * 1024
