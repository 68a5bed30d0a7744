"""A follower whose start takes longer than an election timeout (a big snapshot to restore) rejoins
its group without calling an election: the leader and the term stay as they were. A group whose
leader is gone still elects a new one.

Three TenantGroups in this process on real sockets; groups are built on the main thread (pytest
runs async tests on it), as pysyncobj requires. The slow start is a state restore that sleeps
longer than the largest election timeout, standing in for the seconds a million timers take.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from inprocess_groups import leader_of, slow_restore, three_members, wait_until

from queen_raft.raft import RaftSettings, TenantGroup

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)
# Longer than any election timeout the node may draw, so the deadline armed at construction is past.
SLOW_RESTORE_S = 3 * SETTINGS.election_max_s
# How long the group is watched after the restarted node caught up: several election timeouts.
WATCH_S = 5 * SETTINGS.election_max_s


def views(groups: list[TenantGroup]) -> list[tuple[str | None, int]]:
    return [(group.leader_addr(), group.status()["term"]) for group in groups]


@pytest.fixture
async def cluster(tmp_path):
    async with three_members(tmp_path, SETTINGS) as members:
        yield members


async def restart_slowly(follower: TenantGroup, leader: TenantGroup, cluster) -> TenantGroup:
    """Snapshot the follower, stop it, start it again with a restore slower than an election timeout."""
    _, live, start, stop = cluster
    follower.force_log_compaction()
    await wait_until(lambda: os.path.exists(follower.full_dump_file), "the follower's snapshot")
    await wait_until(lambda: follower.status()["appliedIndex"] >= leader.status()["commitIndex"],
                     "the follower to apply everything")
    await stop(follower.self_addr)
    committed = leader.status()["commitIndex"]
    restarted = start(follower.self_addr, restore=slow_restore(SLOW_RESTORE_S))
    await wait_until(lambda: restarted.status()["appliedIndex"] >= committed and restarted.leader_addr() is not None,
                     "the restarted follower to load, hear a leader and catch up")
    return restarted


async def test_a_follower_with_a_slow_start_rejoins_without_an_election(cluster):
    addrs, live, start, stop = cluster
    for addr in addrs:
        start(addr)
    await wait_until(lambda: leader_of(list(live.values())) is not None, "a leader")
    leader = leader_of(list(live.values()))
    for i in range(20):
        await leader.propose({"op": "set", "key": f"k{i}", "value": i})
    before = (leader.self_addr, leader.status()["term"])

    # Each follower in turn: the one with the higher address dials its peers, the other is dialled.
    followers = sorted((group for group in live.values() if group is not leader), key=lambda g: g.self_addr)
    for follower in reversed(followers):
        restarted = await restart_slowly(follower, leader, cluster)
        watch_until = time.monotonic() + WATCH_S
        while time.monotonic() < watch_until:
            assert set(views(list(live.values()))) == {before}, "the group changed leader or term"
            await asyncio.sleep(0.01)
        assert restarted.peek_local(lambda state: state.values) == {f"k{i}": i for i in range(20)}

    # A group whose leader is really gone still elects one, the restarted nodes taking part.
    await stop(leader.self_addr)
    await wait_until(lambda: leader_of(list(live.values())) is not None, "a new leader after the leader stopped")
    assert leader_of(list(live.values())).status()["term"] > before[1]
