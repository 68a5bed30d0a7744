"""A snapshot writer that succeeds while the journal cannot be compacted after it (the rewritten
journal does not fit on the disk) is followed by a pause before the next writer, as a failed writer
is. pysyncobj's log stays over its threshold, so without the pause it starts a new writer (a fork
of the whole node, and a whole snapshot written to a full disk) for every entry applied, each one
for nothing.

One TenantGroup in this process on a real socket; the journal's rewrite is made to fail with ENOSPC.
"""

from __future__ import annotations

import asyncio
import errno
import time

import pytest
from cluster_fixture import pick_port_runs
from raft_test_state import TimerLogState

import queen_raft.raft.journal as journal_module
from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.snapshot_writer import FAILED_WRITER_PAUSE_FIRST_S

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)
WATCH_S = 2.5


async def test_writers_pause_while_the_journal_cannot_be_compacted_after_them(tmp_path, monkeypatch):
    (port,) = pick_port_runs(1, 1)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path / "n1"), SETTINGS, TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        deadline = time.monotonic() + 5.0
        while not group.is_leader:
            assert time.monotonic() < deadline, "the lone node never became leader"
            await asyncio.sleep(0.01)
        journal = group._syncobj._SyncObj__raftLog
        serializer = group._syncobj._SyncObj__serializer

        def no_room(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(journal_module, "write_journal_file", no_room)
        watch_until = time.monotonic() + WATCH_S
        i = 0
        while time.monotonic() < watch_until:  # a steady trickle of writes: the applied index moves
            await group.propose({"op": "set", "key": f"k{i}", "value": i})
            i += 1
            await asyncio.sleep(0.005)
        published, refused = serializer.snapshots_published, journal.compactions_refused
        assert refused >= 1, "the test never reached a compaction"
        # The first writer at once, then 1 s, 2 s, ... apart: at most 2 in WATCH_S (one more if a
        # writer started before the fault ended after it).
        assert published <= 3, f"{published} writers in {WATCH_S} s, {refused} compactions refused"
        assert serializer.retry_not_before - time.monotonic() > -FAILED_WRITER_PAUSE_FIRST_S
        assert group.peek_local(lambda state: state.values[f"k{i - 1}"]) == i - 1
        assert group.status()["snapshotWriters"]["failing"] >= 1  # what the operator's alert reads

        monkeypatch.undo()  # room again: the next writer's compaction goes through
        before = len(journal)
        deadline = time.monotonic() + 10.0
        while len(journal) >= before:
            assert time.monotonic() < deadline, "the journal was never compacted once there was room"
            await group.propose({"op": "set", "key": "again", "value": 0})
            await asyncio.sleep(0.05)
        assert group.status()["snapshotWriters"]["failing"] == 0
    finally:
        await group.stop()
        group.destroy()
