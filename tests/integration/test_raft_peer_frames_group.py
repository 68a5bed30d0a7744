"""A mixed group in this process, as during a rolling upgrade: two members that read the AEAD peer
frame (queen_raft/raft/peer_frame.py) and one that speaks Fernet alone, as an older version. The two
new members talk AEAD to each other, every link to the old member stays Fernet, no frame is dropped,
and all three apply the same entries, whoever leads."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from queen_raft.raft import RaftSettings
from queen_raft.raft.connection import FastTcpConnection
from test_raft_group_inprocess import groups, wait_until  # noqa: F401 (groups is a fixture)

pytestmark = pytest.mark.integration

_PORTS = itertools.count(17800)
PASSWORD = "mixed group password"


def links(member) -> dict[str, FastTcpConnection]:
    """The member's connection to each peer, by the peer's address."""
    return {node.address: conn for node, conn in member._transport._connections.items()}


def aead_frames(member, peer_addr: str) -> tuple[int, int]:
    conn = links(member).get(peer_addr)
    return (conn.aead_frames_sent, conn.aead_frames_received) if conn is not None else (0, 0)


async def test_new_members_talk_aead_to_each_other_and_fernet_to_an_old_one(groups):  # noqa: F811
    ports = [next(_PORTS) for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    old_addr, new_a, new_b = addrs

    def member(addr: str, port: int):
        return groups(RaftSettings(password=PASSWORD), peers=[a for a in addrs if a != addr], port=port,
                      aead_frames=addr != old_addr)

    dropped = FastTcpConnection.frames_dropped
    loop = asyncio.get_running_loop()
    # The new members first: one of them leads (two of three are a majority), then the old one joins.
    by_addr = {new_a: member(new_a, ports[1]), new_b: member(new_b, ports[2])}
    for m in by_addr.values():
        m.start_tick_loop(loop)
    await wait_until(lambda: any(m.is_leader for m in by_addr.values()), 5.0)
    by_addr[old_addr] = member(old_addr, ports[0])
    by_addr[old_addr].start_tick_loop(loop)
    members = list(by_addr.values())
    stopped = set()
    try:
        await wait_until(lambda: all(m.leader_addr() for m in members), 5.0)

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
        await leader.stop()
        stopped.add(leader)
        leader.destroy()
        rest = [m for m in members if m is not leader]
        rest_addrs = {a for a, m in by_addr.items() if m is not leader}
        await wait_until(lambda: any(m.is_leader for m in rest) and all(m.leader_addr() in rest_addrs for m in rest), 10.0)
        for i, m in enumerate(rest):
            assert (await m.propose({"op": "set", "key": f"k1-{i}", "value": b"v"}))["ok"] is True
        values = [await m.read(lambda s: dict(s.values)) for m in rest]
        assert values[0] == values[1] and values[0].keys() == expected.keys() | {"k1-0", "k1-1"}
        assert FastTcpConnection.frames_dropped == dropped
    finally:
        for m in members:
            if m not in stopped:
                await m.stop()
