"""A group in fsync="group" mode on the lazy filesystem (jepsen/lazyfs/): what it acknowledged survives
a power loss. Needs root and /dev/fuse, like tests/integration/test_lazyfs.py; skipped elsewhere, saying why.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from lazyfs_fixture import NEEDS_LAZYFS, lazy  # noqa: F401  (lazy is a fixture)
from queen_raft.raft import RaftSettings, TenantGroup
from raft_test_state import TimerLogState
from port_blocks import worker_port

pytestmark = [pytest.mark.integration, NEEDS_LAZYFS]

SELF_ELECTION_WAIT_S = 5.0
PORT = worker_port(17950)


async def _acknowledged_write(data_dir: str) -> None:
    addr = f"127.0.0.1:{PORT}"
    group = TenantGroup("t", addr, [addr], data_dir, RaftSettings(tick_ms=1000, fsync="group", password="pw"),
                        TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        deadline = time.monotonic() + SELF_ELECTION_WAIT_S
        while not group.is_leader:
            assert time.monotonic() < deadline, "the lone node never became leader"
            await asyncio.sleep(0.01)
        answer = await group.propose({"op": "set", "key": "k", "value": "acknowledged", "now": 1})
        assert answer["ok"]
    finally:
        group.destroy()


async def test_a_new_group_dir_survives_a_power_loss_after_an_acknowledged_write(lazy):
    """The node creates `<node>/<tenant>/` at its first start; group mode must make those directory
    entries durable too, or a power loss takes the whole journal with it."""
    data_dir = lazy.mountpoint / "n1" / "t"
    await _acknowledged_write(str(data_dir))
    lazy.power_off()
    lazy.mount()
    assert (data_dir / "raft.journal").exists(), "the group's directory did not survive the power loss"
    assert (data_dir / "raft.journal.meta").exists()


ENTRIES = [(b"\x01" + bytes([i]) * 1500, i, 1) for i in range(1, 13)]
REPLACEMENTS = [(b"\x02" + bytes([i]) * 700, i, 2) for i in range(6, 12)]


def _crash(journal) -> None:
    """Close the journal as a kill -9 does: unmapped and closed, never flushed (_destroy msyncs)."""
    stored = journal._FileJournal__journalFile
    stored.mm.close()
    stored.file.close()


def test_a_torn_power_loss_after_a_log_truncation_leaves_a_journal_that_loads(lazy):
    """A follower whose log conflicts with the leader's truncates it and appends the leader's entries
    over its old ones. A power loss before the next flush can leave, sector by sector, old records and
    new ones under the new end offset: the node must still start, on at least what it had flushed."""
    from queen_raft.raft.journal import GroupCommitJournal

    path = str(lazy.mountpoint / "raft.journal")
    for seed in range(1, 25):
        journal = GroupCommitJournal(path, None)
        journal.clear()
        for entry in ENTRIES:
            journal.add(*entry)
        assert journal.flush_if_dirty()
        fd = os.open(lazy.mountpoint, os.O_RDONLY)
        os.fsync(fd)  # the journal's directory entry
        os.close(fd)
        journal.deleteEntriesFrom(5)
        for entry in REPLACEMENTS:
            journal.add(*entry)  # not flushed
        _crash(journal)
        lazy.power_off(torn_seed=seed)
        lazy.mount()
        reopened = GroupCommitJournal(path, None)
        loaded = list(reopened)
        reopened._destroy()
        assert loaded[:5] == ENTRIES[:5], seed
        assert loaded[5:] == REPLACEMENTS[:len(loaded) - 5], seed
