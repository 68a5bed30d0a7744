"""A group whose snapshot writers fail (a full disk, say): the writers pause between tries, the
group says so in its status and /metrics, and the first writer after the cause goes succeeds.

One TenantGroup in this process on a real journal, with its real tick thread; the writer is the
real forked child, whose write fails because the function it calls raises in the forked copy.
"""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft import snapshot_writer
from cluster_fixture import pick_port_runs
from inprocess_groups import scraped_series
from raft_test_state import TimerLogState

pytestmark = pytest.mark.integration

SELF_ELECTION_WAIT_S = 5.0
# pysyncobj asks for a compaction at every tick (autoTickPeriod 50 ms, and at every message): ten
# ticks or more in this window, so without the pause ten writers or more would fail in it.
WATCH_S = 0.5


async def wait_until(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def writers(group: TenantGroup) -> dict:
    return group.status()["snapshotWriters"]


def scraped_writer_series(group: TenantGroup) -> dict[str, float]:
    return scraped_series(group, "acme", "queen_raft_snapshot_writers")


async def test_failing_writers_pause_between_tries_show_in_status_and_metrics_and_recover(tmp_path, monkeypatch):
    (port,) = pick_port_runs(1, 1)  # at random: other test runs on this machine use fixed ports
    addr = f"127.0.0.1:{port}"
    # A log over the compaction threshold: pysyncobj then asks for a snapshot at every tick.
    group = TenantGroup("acme", addr, [addr], str(tmp_path / "acme"), RaftSettings(log_compaction_min_entries=4),
                        TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        await wait_until(lambda: group.is_leader, "the lone node to lead", SELF_ELECTION_WAIT_S)

        def disk_full(path, dump):
            raise OSError(errno.ENOSPC, "No space left on device", path)

        monkeypatch.setattr(snapshot_writer, "write_snapshot", disk_full)
        for value in range(8):
            await group.propose({"op": "set", "key": "a", "value": value})
        await wait_until(lambda: writers(group)["failed"] == 1, "the first writer to fail")
        assert writers(group)["failing"] == 1

        # pysyncobj still wants its compaction and asks at every tick.
        await asyncio.sleep(WATCH_S)
        assert writers(group)["failed"] == 1, "a writer was forked again during the pause"
        assert scraped_writer_series(group) == {"queen_raft_snapshot_writers_failed_total": 1.0,
                                                "queen_raft_snapshot_writers_failing": 1.0}

        # The cause goes: the next writer, after the pause (1 s), succeeds and the count in a row clears.
        monkeypatch.undo()
        await wait_until(lambda: writers(group)["published"] == 1, "a writer to succeed after the pause")
        assert writers(group) == {"published": 1, "failed": 1, "failing": 0}
        assert scraped_writer_series(group)["queen_raft_snapshot_writers_failing"] == 0.0
        await group.stop()
    finally:
        group.destroy()
