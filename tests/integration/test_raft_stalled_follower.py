"""A follower whose tick thread stalls inside a message longer than an election timeout (the install
of a big snapshot from the leader, which restores the whole state in the handler of its last chunk)
does not call an election when it comes back: the leader's heartbeats wait in its socket, and it
reads them before it checks its election deadline. The leader and the term stay as they were.

Three TenantGroups in this process on real sockets (see test_raft_slow_restart.py). The slow
install is a state restore that sleeps longer than the largest election timeout, standing in for
the seconds a million timers take.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time

import pytest
from inprocess_groups import leader_of, slow_restore, three_members, wait_until

from queen_raft.raft import RaftSettings, TenantGroup

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)
# Longer than any election timeout a member may draw.
SLOW_INSTALL_S = 3 * SETTINGS.election_max_s
# How long the group is watched after the install: several election timeouts.
WATCH_S = 5 * SETTINGS.election_max_s
VALUES = {f"k{i}": i for i in range(20)}


def views(groups: list[TenantGroup]) -> set[tuple[str | None, int]]:
    return {(group.leader_addr(), group.status()["term"]) for group in groups}


@pytest.fixture
async def cluster(tmp_path):
    async with three_members(tmp_path, SETTINGS) as members:
        yield members


async def test_a_wiped_follower_that_installs_a_slow_snapshot_does_not_depose_the_leader(cluster):
    addrs, live, start, stop = cluster
    for addr in addrs:
        start(addr)
    await wait_until(lambda: leader_of(list(live.values())) is not None, "a leader")
    leader = leader_of(list(live.values()))
    for key, value in VALUES.items():
        await leader.propose({"op": "set", "key": key, "value": value})
    before = (leader.self_addr, leader.status()["term"])
    follower = min((g for g in live.values() if g is not leader), key=lambda g: g.self_addr)
    data_dir = os.path.dirname(follower.full_dump_file)
    await stop(follower.self_addr)
    shutil.rmtree(data_dir)
    # The leader's log no longer holds the wiped member's next entry: it must send its snapshot.
    leader.force_log_compaction()
    await wait_until(lambda: os.path.exists(leader.full_dump_file), "the leader's snapshot")
    await wait_until(lambda: not leader._syncobj._SyncObj__serializer.writing, "the leader's writer to finish")

    installed_at = []
    restore = slow_restore(SLOW_INSTALL_S)

    def timed_restore(data: bytes):
        state = restore(data)
        installed_at.append(time.monotonic())
        return state

    restarted = start(follower.self_addr, restore=timed_restore)
    await wait_until(lambda: installed_at, "the install of the leader's snapshot", SLOW_INSTALL_S + 10.0)
    watch_until = time.monotonic() + WATCH_S
    while time.monotonic() < watch_until:
        assert views(list(live.values())) == {before}, "the group changed leader or term"
        await asyncio.sleep(0.01)
    assert restarted.peek_local(lambda state: state.values) == VALUES
