"""How each peer link is framed (queen_raft/raft/peer_links.py), read from real connections over
socketpairs of each kind (AEAD both ways, Fernet to an older peer, plain without a password, none
while down or in the handshake), and as /metrics and /health show it."""

from __future__ import annotations

import os
import socket
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pysyncobj.encryptor import getEncryptor
from pysyncobj.node import TCPNode

from queen_raft.api.metrics import ApiMetrics
from queen_raft.raft.connection import FastTcpConnection
from queen_raft.raft.peer_links import AEAD, FERNET, NONE, PLAIN, frame_kind, peer_links
from test_api_fake_group import ApiHarness
from tests.unit.test_raft_peer_frame import PASSWORD, linked, poller, pump  # noqa: F401 (fixtures)

PEERS = ["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403", "127.0.0.1:7404", "127.0.0.1:7405"]


class NoIteration(dict):
    """A dict that fails a test that iterates it: the tick thread may grow or shrink the real ones."""

    def _refuse(self, *args):
        raise AssertionError("iterated a dict the tick thread mutates")

    __iter__ = keys = values = items = copy = _refuse


def fake_transport(conns_by_addr: dict) -> SimpleNamespace:
    """The two maps of pysyncobj's TCPTransport that peer_links reads: address -> node, node -> conn."""
    nodes = {addr: TCPNode(addr) for addr in PEERS}
    return SimpleNamespace(_nodeAddrToNode=NoIteration(nodes),
                           _connections=NoIteration({nodes[addr]: conn for addr, conn in conns_by_addr.items()}))


@pytest.fixture
def one_of_each(linked, poller):  # noqa: F811
    """({peer: connection} with one link of each kind, the AEAD link's other end); the AEAD end
    sent 3 frames and received 1."""
    made = []

    def unlinked_end() -> FastTcpConnection:
        left, right = socket.socketpair()
        made.extend([FastTcpConnection(poller, socket=left, timeout=60), right])
        return made[-2]

    aead, aead_got, aead_peer, aead_peer_got = linked(True, True)
    fernet, _, _, _ = linked(True, False)  # the peer is an older version
    plain = unlinked_end()  # no password: no handshake of keys
    in_handshake = unlinked_end()
    in_handshake.encryptor = getEncryptor(PASSWORD)
    in_handshake.recvRandKey = os.urandom(32)  # sent; the peer's key has not come back
    for i in range(3):
        aead.send({"type": "ping", "i": i})
    pump(poller, lambda: len(aead_peer_got) == 3, aead, aead_peer)
    aead_peer.send({"type": "pong"})
    pump(poller, lambda: aead_got, aead, aead_peer)
    assert [m["i"] for m in aead_peer_got] == [0, 1, 2] and aead_got == [{"type": "pong"}]
    # PEERS[4] was never connected: no connection object (this end does not dial it).
    yield {PEERS[0]: aead, PEERS[1]: fernet, PEERS[2]: plain, PEERS[3]: in_handshake}, aead_peer
    for end in made:
        (end.disconnect if isinstance(end, FastTcpConnection) else end.close)()


def test_each_connection_reports_its_frame_kind(one_of_each, linked):  # noqa: F811
    conns, aead_peer = one_of_each
    assert [frame_kind(conns[p]) for p in PEERS[:4]] == [AEAD, FERNET, PLAIN, NONE]
    assert frame_kind(aead_peer) == AEAD  # the acceptor's end says the same
    # An old end sees the new one's offer but reads no AEAD frame itself: Fernet both ways, from
    # either end of either kind of dial.
    _, _, old_acceptor, _ = linked(True, False)
    old_dialer, _, new_acceptor, _ = linked(False, True)
    assert [frame_kind(c) for c in (old_acceptor, old_dialer, new_acceptor)] == [FERNET] * 3
    assert frame_kind(None) == NONE
    conns[PEERS[0]].disconnect()
    assert frame_kind(conns[PEERS[0]]) == NONE


def test_peer_links_names_every_configured_peer_without_iterating_the_transport(one_of_each):
    conns, _ = one_of_each
    links = peer_links(fake_transport(conns), PEERS)
    assert {peer: link["frame"] for peer, link in links.items()} == {
        PEERS[0]: AEAD, PEERS[1]: FERNET, PEERS[2]: PLAIN, PEERS[3]: NONE, PEERS[4]: NONE}
    assert (links[PEERS[0]]["aeadFramesSent"], links[PEERS[0]]["aeadFramesReceived"]) == (3, 1)
    assert all(links[p]["aeadFramesSent"] == links[p]["aeadFramesReceived"] == 0 for p in PEERS[1:])


def scrape(links: dict) -> dict[str, dict[tuple, float]]:
    group = SimpleNamespace(peek_local=lambda fn: ({}, 0),
                            status=lambda: {"role": "follower", "term": 2, "commitIndex": 5, "peerLinks": links})
    text = ApiMetrics(groups_source=lambda: {"acme": group}).exposition().decode()
    return {family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples if not s.name.endswith("_created")}
            for family in text_string_to_metric_families(text)}


def test_metrics_export_one_series_per_peer_with_its_frame_and_the_aead_frame_counts(one_of_each):
    conns, _ = one_of_each
    families = scrape(peer_links(fake_transport(conns), PEERS))
    assert families["queen_raft_peer_links"] == {
        (("frame", kind), ("peer", peer), ("tenant", "acme")): 1.0
        for peer, kind in zip(PEERS, (AEAD, FERNET, PLAIN, NONE, NONE))}
    frames = families["queen_raft_peer_aead_frames"]
    assert frames[(("direction", "sent"), ("peer", PEERS[0]), ("tenant", "acme"))] == 3.0
    assert frames[(("direction", "received"), ("peer", PEERS[0]), ("tenant", "acme"))] == 1.0
    assert len(frames) == 2 * len(PEERS) and sum(frames.values()) == 4.0


def test_a_group_without_peers_exports_the_families_without_series():
    families = scrape({})
    assert families["queen_raft_peer_links"] == {} and families["queen_raft_peer_aead_frames"] == {}


async def test_health_names_each_peer_links_frame(one_of_each):
    conns, _ = one_of_each
    links = peer_links(fake_transport(conns), PEERS)
    async with ApiHarness() as api:  # checks the answer against the OpenAPI document on close
        group = api.groups["acme"]
        base = type(group).status(group)
        group.status = lambda: {**base, "peerLinks": links}
        status, _, body = await api.call("GET", "/health", token=None)
        assert status == 200
        assert body["groups"]["acme"]["peerLinks"] == {
            PEERS[0]: "aead", PEERS[1]: "fernet", PEERS[2]: "plain", PEERS[3]: "none", PEERS[4]: "none"}
        assert body["groups"]["globex"]["peerLinks"] == {}
