"""A TenantGroup in this process whose snapshot passes its checksum but whose state does not restore:
the start is refused (DataDirRefused from wait_bound) and the group never votes for itself or leads.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.snapshot_file import DataDirRefused
from cluster_fixture import pick_port_runs
from raft_test_state import TimerLogState

pytestmark = pytest.mark.integration

DEADLINE_S = 10.0


async def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def restore_that_fails(data: bytes):
    raise ValueError("a state this code cannot read")


async def test_a_snapshot_whose_state_does_not_restore_refuses_the_start_and_never_leads(tmp_path):
    settings = RaftSettings(log_compaction_min_entries=5)
    (port,) = pick_port_runs(1, 1)  # at random: other test runs on this machine use fixed 17xxx ports
    addr = f"127.0.0.1:{port}"
    data_dir = str(tmp_path / "group")
    group = TenantGroup("t", addr, [addr], data_dir, settings, TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        await wait_until(lambda: group.is_leader, "the lone node to lead")
        for i in range(10):
            await group.propose({"op": "set", "key": f"k{i}", "value": i})
        group.force_log_compaction()
        await wait_until(lambda: os.path.exists(os.path.join(data_dir, "raft.snapshot")), "a snapshot")
        await group.stop()
    finally:
        group.destroy()

    reopened = TenantGroup("t", addr, [addr], data_dir, settings, TimerLogState, restore_that_fails)
    try:
        with pytest.raises(DataDirRefused, match="ValueError: a state this code cannot read") as raised:
            reopened.wait_bound()
        assert "wipe this node's data dir and restart it" in str(raised.value)
        term = reopened.status()["term"]
        # A lone node elects itself within one election timeout: three of them pass, and it did not.
        await asyncio.sleep(3 * settings.election_max_s)
        status = reopened.status()
        assert (status["role"], status["term"]) == ("follower", term)
    finally:
        reopened.destroy()
