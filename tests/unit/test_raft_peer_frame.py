"""The AEAD peer frame (queen_raft/raft/peer_frame.py) over socketpairs: negotiated in the
handshake, sent only to a peer that offered it, and checked before anything is unpickled (another
password, a changed byte, another connection, a replayed or reordered frame, a Fernet frame after
the switch: each drops the connection)."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import time
import zlib

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE

from queen_raft.raft import peer_frame
from queen_raft.raft.connection import FastTcpConnection
from tests.unit.test_raft_connection_guards import Gadget  # counts its own unpickling

PASSWORD = "cluster password"
POLLS = 100
POLL_TIMEOUT_S = 0.01


def connection(poller, sock, received: list, aead: bool) -> FastTcpConnection:
    conn = FastTcpConnection(poller, socket=sock, onMessageReceived=received.append, timeout=60)
    conn.encryptor = getEncryptor(PASSWORD)
    conn.frame_master = peer_frame.master_key(PASSWORD) if aead else None
    return conn


def pump(poller, until, *conns) -> None:
    for _ in range(POLLS):
        poller.poll(POLL_TIMEOUT_S)
        if until() or any(c.state == CONNECTION_STATE.DISCONNECTED for c in conns):
            return


def handshake(poller, dialer, dialer_got, acceptor, acceptor_got) -> None:
    """The key exchange pysyncobj's TCPTransport runs on a new connection with a password."""
    dialer.recvRandKey = os.urandom(32)
    dialer.send(dialer.recvRandKey)
    pump(poller, lambda: acceptor_got, dialer, acceptor)
    acceptor.sendRandKey = acceptor_got.pop()
    acceptor.recvRandKey = os.urandom(32)
    acceptor.send(acceptor.recvRandKey)
    pump(poller, lambda: dialer_got, dialer, acceptor)
    dialer.sendRandKey = dialer_got.pop()


@pytest.fixture
def poller():
    return createPoller("auto")


@pytest.fixture
def linked(poller):
    """(dialer, its inbox, acceptor, its inbox) over a socketpair, each new or old as asked."""
    made = []

    def make(dialer_aead: bool, acceptor_aead: bool):
        left, right = socket.socketpair()
        left.setblocking(False)
        right.setblocking(False)
        dialer_got, acceptor_got = [], []
        dialer = connection(poller, left, dialer_got, dialer_aead)
        acceptor = connection(poller, right, acceptor_got, acceptor_aead)
        made.extend([dialer, acceptor])
        handshake(poller, dialer, dialer_got, acceptor, acceptor_got)
        return dialer, dialer_got, acceptor, acceptor_got

    yield make
    for conn in made:
        conn.disconnect()


@pytest.mark.parametrize("dialer_aead,acceptor_aead", [(True, True), (True, False), (False, True), (False, False)])
def test_messages_cross_both_ways_and_aead_only_when_both_ends_read_it(poller, linked, dialer_aead, acceptor_aead):
    dialer, dialer_got, acceptor, acceptor_got = linked(dialer_aead, acceptor_aead)
    for i in range(3):
        dialer.send({"type": "append_entries", "entries": [(os.urandom(100), i, 1)]})
        acceptor.send({"type": "next_node_idx", "next_node_idx": i})
    pump(poller, lambda: len(dialer_got) == 3 and len(acceptor_got) == 3, dialer, acceptor)
    assert [m["next_node_idx"] for m in dialer_got] == [0, 1, 2]
    assert [m["entries"][0][1] for m in acceptor_got] == [0, 1, 2]
    both = dialer_aead and acceptor_aead
    assert (dialer.aead_frames_sent, acceptor.aead_frames_received) == ((3, 3) if both else (0, 0))
    assert (acceptor.aead_frames_sent, dialer.aead_frames_received) == ((3, 3) if both else (0, 0))
    assert dialer.state == acceptor.state == CONNECTION_STATE.CONNECTED


def test_a_node_of_an_older_version_sees_a_plain_32_byte_key_and_the_new_one_an_offer(poller):
    received: list = []
    old = connection(poller, None, received, aead=False)
    new = connection(poller, None, received, aead=True)
    old.recvRandKey = os.urandom(32)
    new.recvRandKey = os.urandom(32)
    assert len(old.recvRandKey) == 32 and not peer_frame.offers_aead(old.recvRandKey)
    assert peer_frame.offers_aead(new.recvRandKey)


# -- a receiver that negotiated AEAD frames, fed raw bytes ----------------------------------------

@pytest.fixture
def receiver(poller):
    """(raw sending socket, receiver, its inbox, the cipher of the direction towards it): the
    receiver's handshake is done, the peer's key offered AEAD frames."""
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    conn = connection(poller, right, received, aead=True)
    conn.recvRandKey = os.urandom(32)
    peer_key = os.urandom(32) + peer_frame.AEAD_OFFER
    conn.sendRandKey = peer_key
    cipher = peer_frame.direction_cipher(peer_frame.master_key(PASSWORD), conn.recvRandKey, peer_key)
    yield left, conn, received, cipher
    left.close()
    conn.disconnect()


def framed(body: bytes) -> bytes:
    return struct.pack("i", len(body)) + body


def test_an_aead_frame_of_the_direction_is_read(poller, receiver):
    raw, conn, received, cipher = receiver
    raw.sendall(framed(peer_frame.seal(cipher, 0, {"n": 0})) + framed(peer_frame.seal(cipher, 1, {"n": 1})))
    pump(poller, lambda: len(received) == 2, conn)
    assert received == [{"n": 0}, {"n": 1}] and conn.state == CONNECTION_STATE.CONNECTED


def assert_dropped_unread(poller, raw, conn, received, data: bytes, already: int = 0) -> None:
    before, dropped = Gadget.unpickled, FastTcpConnection.frames_dropped
    raw.sendall(data)
    pump(poller, lambda: len(received) > already, conn)
    assert conn.state == CONNECTION_STATE.DISCONNECTED
    assert len(received) == already and Gadget.unpickled == before
    assert FastTcpConnection.frames_dropped == dropped + 1


def test_a_changed_byte_is_dropped_before_unpickling(poller, receiver):
    raw, conn, received, cipher = receiver
    body = bytearray(peer_frame.seal(cipher, 0, Gadget()))
    body[len(body) // 2] ^= 0x01
    assert_dropped_unread(poller, raw, conn, received, framed(bytes(body)))


def test_a_frame_under_another_password_is_dropped_before_unpickling(poller, receiver):
    raw, conn, received, _ = receiver
    other = peer_frame.direction_cipher(peer_frame.master_key("another password"), conn.recvRandKey, conn.sendRandKey)
    assert_dropped_unread(poller, raw, conn, received, framed(peer_frame.seal(other, 0, Gadget())))


def test_a_frame_of_another_connection_or_the_other_direction_is_dropped(poller, receiver):
    raw, conn, received, _ = receiver
    master = peer_frame.master_key(PASSWORD)
    reverse = peer_frame.direction_cipher(master, conn.sendRandKey, conn.recvRandKey)  # the receiver's own sends
    assert_dropped_unread(poller, raw, conn, received, framed(peer_frame.seal(reverse, 0, Gadget())))


def test_a_frame_of_an_earlier_connection_is_dropped(poller, receiver):
    raw, conn, received, _ = receiver
    earlier = peer_frame.direction_cipher(peer_frame.master_key(PASSWORD), os.urandom(32) + peer_frame.AEAD_OFFER,
                                          conn.sendRandKey)
    assert_dropped_unread(poller, raw, conn, received, framed(peer_frame.seal(earlier, 0, Gadget())))


def test_a_replayed_frame_is_dropped(poller, receiver):
    raw, conn, received, cipher = receiver
    first = framed(peer_frame.seal(cipher, 0, Gadget()))
    raw.sendall(first)
    pump(poller, lambda: received, conn)
    assert received == ["marked"]
    assert_dropped_unread(poller, raw, conn, received, first, already=1)


def test_a_frame_out_of_order_is_dropped(poller, receiver):
    raw, conn, received, cipher = receiver
    assert_dropped_unread(poller, raw, conn, received, framed(peer_frame.seal(cipher, 1, Gadget())))


def test_after_the_switch_a_fernet_frame_is_refused_even_with_the_password(poller, receiver):
    raw, conn, received, _ = receiver
    token = getEncryptor(PASSWORD).encrypt_at_time(
        zlib.compress(pickle.dumps((conn.recvRandKey, Gadget()), protocol=4)), int(time.monotonic()))
    assert_dropped_unread(poller, raw, conn, received, framed(token))


def test_an_aead_frame_before_the_handshake_offered_it_is_dropped(poller):
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    conn = connection(poller, right, received, aead=True)
    cipher = peer_frame.direction_cipher(peer_frame.master_key(PASSWORD), b"", b"")
    try:
        assert_dropped_unread(poller, left, conn, received, framed(peer_frame.seal(cipher, 0, Gadget())))
    finally:
        left.close()


def test_a_node_of_an_older_version_drops_an_aead_frame_unread(poller):
    left, right = socket.socketpair()
    left.setblocking(False)
    right.setblocking(False)
    received: list = []
    old = connection(poller, right, received, aead=False)
    old.recvRandKey = os.urandom(32)
    old.sendRandKey = os.urandom(32) + peer_frame.AEAD_OFFER
    cipher = peer_frame.direction_cipher(peer_frame.master_key(PASSWORD), old.recvRandKey, old.sendRandKey)
    try:
        assert_dropped_unread(poller, left, old, received, framed(peer_frame.seal(cipher, 0, Gadget())))
    finally:
        left.close()


def test_the_kind_byte_never_starts_a_fernet_token():
    alphabet = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    assert peer_frame.AEAD_FRAME_KIND not in alphabet
    assert getEncryptor(PASSWORD).encrypt(b"x")[0] in alphabet


def test_the_frame_is_raw_bytes_with_a_tag_and_no_base64():
    cipher = peer_frame.direction_cipher(b"k" * 32, b"r", b"s")
    payload = os.urandom(4096)
    body = peer_frame.seal(cipher, 0, payload)
    assert len(body) == 1 + len(pickle.dumps(payload, protocol=4)) + peer_frame.TAG_BYTES
