"""A mixed group in this process, as during a rolling upgrade: two members that read the AEAD peer
frame (queen_raft/raft/peer_frame.py) and one that speaks Fernet alone, as an older version. The two
new members talk AEAD to each other, every link to the old member stays Fernet, no frame is dropped,
and all three apply the same entries, whoever leads. The metrics an operator watches the upgrade by
(queen_raft_peer_links, queen_raft/raft/peer_links.py) say so for each link, and `none` for a link
to a member that stopped."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from types import SimpleNamespace
from typing import NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queen_raft.api.metrics import ApiMetrics
from queen_raft.raft import RaftSettings
from queen_raft.raft.connection import FastTcpConnection
from queen_raft.raft.settings import CONNECTION_TIMEOUT_S
from lone_group_fixture import groups, wait_until  # noqa: F401 (groups is a fixture)
from port_blocks import worker_port

pytestmark = pytest.mark.integration

_PORTS = itertools.count(worker_port(17800))
PASSWORD = "mixed group password"
# The rejoin hold's bound (connection timeout + retry), an election timeout, and room for a loaded machine.
ELECTION_WITH_HOLD_S = CONNECTION_TIMEOUT_S + RaftSettings().connection_retry_s + RaftSettings().election_max_s + 4.0


def links(member) -> dict[str, FastTcpConnection]:
    """The member's connection to each peer, by the peer's address."""
    return {node.address: conn for node, conn in member._transport._connections.items()}


def aead_frames(member, peer_addr: str) -> tuple[int, int]:
    conn = links(member).get(peer_addr)
    return (conn.aead_frames_sent, conn.aead_frames_received) if conn is not None else (0, 0)


class MixedGroup(NamedTuple):
    by_addr: dict  # address -> member
    old_addr: str  # the member that speaks Fernet alone
    new_a: str
    new_b: str
    stopped: set  # the members a test stopped itself

    async def stop_and_destroy(self, member) -> None:
        await member.stop()
        self.stopped.add(member)
        member.destroy()


@contextlib.asynccontextmanager
async def mixed_group(groups):  # noqa: F811
    """Two new members and an old one, each knowing a leader; the members still running are
    stopped on exit."""
    ports = [next(_PORTS) for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    old_addr, new_a, new_b = addrs

    def member(addr: str, port: int):
        return groups(RaftSettings(password=PASSWORD), peers=[a for a in addrs if a != addr], port=port,
                      aead_frames=addr != old_addr)

    loop = asyncio.get_running_loop()
    mixed = MixedGroup({}, old_addr, new_a, new_b, set())
    try:
        # The new members first: one of them leads (two of three are a majority), then the old one joins.
        for addr, port in ((new_a, ports[1]), (new_b, ports[2])):
            mixed.by_addr[addr] = member(addr, port)
            mixed.by_addr[addr].start_tick_loop(loop)
        # Two of three started: each holds its candidacy while the third is unreachable, for up to
        # the rejoin hold's bound (snapshot_guard.py), then elects within an election timeout.
        await wait_until(lambda: any(m.is_leader for m in mixed.by_addr.values()), ELECTION_WITH_HOLD_S)
        mixed.by_addr[old_addr] = member(old_addr, ports[0])
        mixed.by_addr[old_addr].start_tick_loop(loop)
        await wait_until(lambda: all(m.leader_addr() for m in mixed.by_addr.values()), 5.0)
        yield mixed
    finally:
        for m in mixed.by_addr.values():
            if m not in mixed.stopped:
                await m.stop()


async def test_new_members_talk_aead_to_each_other_and_fernet_to_an_old_one(groups):  # noqa: F811
    dropped = FastTcpConnection.frames_dropped
    async with mixed_group(groups) as mixed:
        by_addr, old_addr, new_a, new_b = mixed.by_addr, mixed.old_addr, mixed.new_a, mixed.new_b
        members = list(by_addr.values())
        for i, m in enumerate(members):
            assert (await m.propose({"op": "set", "key": f"k0-{i}", "value": b"\x00" * (i + 1)}))["ok"] is True
        expected = {f"k0-{i}": b"\x00" * (i + 1) for i in range(3)}
        for m in members:
            assert await m.read(lambda s: dict(s.values)) == expected
        # The leader sent append_entries to both followers, and each answered.
        await wait_until(lambda: min(*aead_frames(by_addr[new_a], new_b), *aead_frames(by_addr[new_b], new_a)) > 0, 5.0)
        for new in (new_a, new_b):
            assert aead_frames(by_addr[new], old_addr) == (0, 0)
            assert aead_frames(by_addr[old_addr], new) == (0, 0)

        # The new leader stops: the old member and a new one carry on (either may lead), Fernet between them.
        leader = next(m for m in members if m.is_leader)
        await mixed.stop_and_destroy(leader)
        rest = [m for m in members if m is not leader]
        rest_addrs = {a for a, m in by_addr.items() if m is not leader}
        await wait_until(lambda: any(m.is_leader for m in rest) and all(m.leader_addr() in rest_addrs for m in rest), 10.0)
        for i, m in enumerate(rest):
            assert (await m.propose({"op": "set", "key": f"k1-{i}", "value": b"v"}))["ok"] is True
        values = [await m.read(lambda s: dict(s.values)) for m in rest]
        assert values[0] == values[1] and values[0].keys() == expected.keys() | {"k1-0", "k1-1"}
        assert FastTcpConnection.frames_dropped == dropped


def scraped(member) -> dict[str, dict]:
    """The member's peer link series as its /metrics renders them: {family: {(peer, label): value}}.
    The collector reads the member's real status (its transport's connections); the fixture's state
    is not a tenant's, so the state's figures are stood in for."""
    group = SimpleNamespace(peek_local=lambda fn: ({}, 0), status=member.status)
    text = ApiMetrics(groups_source=lambda: {"acme": group}).exposition().decode()
    return {family.name: {(s.labels["peer"], s.labels.get("frame") or s.labels["direction"]): s.value
                          for s in family.samples if not s.name.endswith("_created")}
            for family in text_string_to_metric_families(text) if family.name.startswith("queen_raft_peer_")}


async def wait_for_links(mixed: MixedGroup, expected: dict[str, dict[str, str]], timeout_s: float) -> None:
    """Until each member's queen_raft_peer_links says expected[member] ({peer: frame}), one series
    per peer, each at 1."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        seen = {addr: scraped(mixed.by_addr[addr])["queen_raft_peer_links"] for addr in expected}
        wanted = {addr: {(peer, frame): 1.0 for peer, frame in links.items()} for addr, links in expected.items()}
        if seen == wanted:
            return
        assert asyncio.get_running_loop().time() < deadline, f"peer links {seen}, expected {wanted}"
        await asyncio.sleep(0.02)


async def test_metrics_show_aead_between_new_members_fernet_to_the_old_one_and_none_to_a_stopped_one(groups):  # noqa: F811
    async with mixed_group(groups) as mixed:
        old, new_a, new_b = mixed.old_addr, mixed.new_a, mixed.new_b
        assert (await mixed.by_addr[new_a].propose({"op": "set", "key": "k", "value": b"v"}))["ok"] is True
        await wait_for_links(mixed, {new_a: {new_b: "aead", old: "fernet"}, new_b: {new_a: "aead", old: "fernet"},
                                     old: {new_a: "fernet", new_b: "fernet"}}, 10.0)
        # Heartbeats and their answers flow every append_entries_period: both ways count on the AEAD link.
        await wait_until(lambda: min(scraped(mixed.by_addr[new_a])["queen_raft_peer_aead_frames"][(new_b, d)]
                                     for d in ("sent", "received")) > 0, 5.0)
        for addr, peer in ((new_a, old), (old, new_a), (old, new_b)):
            frames = scraped(mixed.by_addr[addr])["queen_raft_peer_aead_frames"]
            assert frames[(peer, "sent")] == frames[(peer, "received")] == 0.0

        await mixed.stop_and_destroy(mixed.by_addr[new_b])
        await wait_for_links(mixed, {new_a: {new_b: "none", old: "fernet"}, old: {new_a: "fernet", new_b: "none"}}, 10.0)
        assert mixed.by_addr[new_a].status()["peerLinks"][new_b] == {
            "frame": "none", "aeadFramesSent": 0, "aeadFramesReceived": 0}
