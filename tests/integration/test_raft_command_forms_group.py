"""Three in-process members on loopback learn that every member applies the newer command forms
(queen_raft/raft/command_forms.py), the followers too, through the leader's vouching; and a member
that drops out makes the others fall back to the older forms until it is heard again."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from queen_raft.raft import RaftSettings
from queen_raft.raft.command_forms import PUSH_ROWS_LEVEL
from lone_group_fixture import groups, wait_until  # noqa: F401 (groups is a fixture)
from port_blocks import worker_port

pytestmark = pytest.mark.integration

_PORTS = itertools.count(worker_port(17700))


async def test_every_member_learns_the_group_applies_rows_and_falls_back_when_one_drops(groups):  # noqa: F811
    ports = [next(_PORTS) for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    members = [groups(RaftSettings(), peers=[a for a in addrs if a != addrs[i]], port=p)
               for i, p in enumerate(ports)]
    loop = asyncio.get_running_loop()
    for member in members:
        member.start_tick_loop(loop)
    await wait_until(lambda: any(m.is_leader for m in members) and all(m.leader_addr() for m in members), 5.0)
    await next(m for m in members if m.is_leader).propose({"op": "set", "key": "k", "value": b"v"})
    await wait_until(lambda: all(m.peers_apply(PUSH_ROWS_LEVEL) for m in members), 5.0)

    gone = next(m for m in members if not m.is_leader)
    await gone.stop()
    gone.destroy()
    rest = [m for m in members if m is not gone]
    # The others lose its connection (its node may come back on older code) and stop vouching.
    await wait_until(lambda: not any(m.peers_apply(PUSH_ROWS_LEVEL) for m in rest), 10.0)
    for member in rest:
        await member.stop()
