"""Three members of one group in this process (TenantGroups of the test state), on free ports."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

from cluster_fixture import pick_port_runs
from prometheus_client.parser import text_string_to_metric_families
from raft_test_state import TimerLogState

from queen_raft.api.metrics import ApiMetrics
from queen_raft.raft import RaftSettings, TenantGroup


@contextlib.asynccontextmanager
async def three_members(tmp_path, settings: RaftSettings) -> AsyncIterator[tuple]:
    """(addrs, live groups by address, start(addr, restore=..., dial_map=None), async stop(addr)).

    Nothing starts on its own; every member still running is stopped at the end."""
    (base,) = pick_port_runs(1, 3)  # at random: other test runs on this machine use fixed 17xxx ports
    addrs = [f"127.0.0.1:{base + i}" for i in range(3)]
    live: dict[str, TenantGroup] = {}

    def start(addr: str, restore=TimerLogState.restore, dial_map=None) -> TenantGroup:
        group = TenantGroup("t", addr, addrs, str(tmp_path / addr.replace(":", "_")), settings,
                            TimerLogState, restore, dial_map=dial_map)
        group.start_tick_loop(asyncio.get_running_loop())
        live[addr] = group
        return group

    async def stop(addr: str) -> None:
        group = live.pop(addr)
        try:
            await group.stop()
        finally:
            group.destroy()

    try:
        yield addrs, live, start, stop
    finally:
        # stop() before destroy(): a tick loop left running can swallow the runner's cancellation.
        for addr in list(live):
            await stop(addr)


async def wait_until(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def all_started(addrs, live, start) -> tuple[TenantGroup, TenantGroup]:
    """Starts every member and waits for a leader: (the leader, one of its followers)."""
    for addr in addrs:
        start(addr)
    await wait_until(lambda: leader_of(list(live.values())) is not None, "a leader")
    leader = leader_of(list(live.values()))
    return leader, next(group for group in live.values() if group is not leader)


async def wipe_and_compact_past(follower, leader, stop, entries: int = 40) -> str:
    """Stops `follower` and deletes its data dir, then has the leader commit `entries` entries and
    compact its log past them, so the wiped member can rejoin only through the leader's snapshot.
    The follower's address (start it again to rejoin)."""
    follower_addr, follower_dir = follower.self_addr, follower.data_dir
    await stop(follower_addr)
    shutil.rmtree(follower_dir)
    for i in range(entries):
        await leader.propose({"op": "set", "key": f"k{i}", "value": i})
    leader.force_log_compaction()
    journal = leader._syncobj._SyncObj__raftLog
    await wait_until(lambda: os.path.exists(leader.full_dump_file) and journal.indexes[0] > 2,
                     "the leader's log to be compacted")
    return follower_addr


def leader_of(groups) -> TenantGroup | None:
    """The one member that believes it leads, or None (none, or two during a change of term)."""
    leaders = [group for group in groups if group.is_leader]
    return leaders[0] if len(leaders) == 1 else None


def slow_restore(seconds: float):
    """A restore of the test state that first sleeps, as the load of a large state takes time."""
    def restore(data: bytes) -> TimerLogState:
        time.sleep(seconds)
        return TimerLogState.restore(data)
    return restore


def scraped_series(group, tenant: str, prefix: str) -> dict[str, float]:
    """The samples whose names start with prefix in /metrics for this group alone (its real
    status; the test state has no timer counters for the collector's other families)."""
    scraped = SimpleNamespace(peek_local=lambda fn: ({}, 0), status=group.status)
    text = ApiMetrics(groups_source=lambda: {tenant: scraped}).exposition().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name.startswith(prefix) and not sample.name.endswith("_created")}
