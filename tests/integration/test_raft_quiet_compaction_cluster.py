"""Three members of a group in this process: after a burst the log goes quiet, and each member
writes one snapshot (quiet_compaction.py), one after the other, and no more while it stays quiet.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.compaction_turn import DEFAULT_STAGGER_S, MIN_STAGGER_S
from queen_raft.raft.quiet_compaction import QUIET_MIN_ENTRIES, QUIET_S
from cluster_fixture import pick_port_runs
from raft_test_state import TimerLogState

pytestmark = pytest.mark.integration

DEADLINE_S = 30.0


def published(group: TenantGroup) -> int:
    return group._syncobj._SyncObj__serializer.snapshots_published


async def wait_for_leader(groups: list[TenantGroup]) -> TenantGroup:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        leaders = [g for g in groups if g.is_leader]
        if leaders and all(g.leader_addr() == leaders[0].self_addr for g in groups):
            return leaders[0]
        assert time.monotonic() < deadline, "no leader"
        await asyncio.sleep(0.02)


async def test_after_a_burst_each_member_writes_one_snapshot_in_turn_and_no_more(tmp_path):
    settings = RaftSettings(log_compaction_min_entries=2000)
    (port,) = pick_port_runs(1, 3)
    addrs = [f"127.0.0.1:{port + i}" for i in range(3)]
    groups = []
    try:
        for i, addr in enumerate(addrs):
            groups.append(TenantGroup("t", addr, addrs, str(tmp_path / f"m{i}"), settings,
                                      TimerLogState, TimerLogState.restore))
        loop = asyncio.get_running_loop()
        for group in groups:
            group.start_tick_loop(loop)
        leader = await wait_for_leader(groups)
        for i in range(QUIET_MIN_ENTRIES + 16):
            await leader.propose({"op": "set", "key": f"k{i}", "value": i})
        assert [published(g) for g in groups] == [0, 0, 0]  # far below a turn: no regular compaction

        first_seen: dict[int, float] = {}
        deadline = time.monotonic() + DEADLINE_S
        while len(first_seen) < 3:
            for i, group in enumerate(groups):
                if i not in first_seen and published(group):
                    first_seen[i] = time.monotonic()
            assert time.monotonic() < deadline, f"snapshots published: {[published(g) for g in groups]}"
            await asyncio.sleep(0.01)
        times = sorted(first_seen.values())
        # One member at a time, a stagger apart (no writer had run yet: the default stagger).
        assert min(b - a for a, b in zip(times, times[1:])) >= DEFAULT_STAGGER_S - 0.3
        # The tick thread publishes a snapshot and then rewrites the journal (a flushed new file):
        # the log is cut a moment after the count moves.
        while not all(len(group._syncobj._SyncObj__raftLog) <= 3 for group in groups):
            assert time.monotonic() < deadline, [len(group._syncobj._SyncObj__raftLog) for group in groups]
            await asyncio.sleep(0.01)

        # Quiet on: a second round would come within QUIET_S and three (now short) staggers.
        await asyncio.sleep(QUIET_S + 4 * MIN_STAGGER_S + 1.0)
        assert [published(g) for g in groups] == [1, 1, 1]
    finally:
        for group in groups:
            await group.stop()
            group.destroy()
