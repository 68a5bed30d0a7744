"""A follower that needs the leader's snapshot on a disk that cannot take it (full) logs that once
an episode, not once per transfer: the leader sends the snapshot again and again for as long as the
follower lags, and each failed write was logged with a traceback. The follower installs it once the
disk takes it.

Three TenantGroups in this process on real sockets; the wiped follower's writes of a received
snapshot fail with ENOSPC.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import logging

import pytest
from inprocess_groups import all_started, three_members, wait_until, wipe_and_compact_past

import queen_raft.raft.snapshot_receive as snapshot_receive
from queen_raft.raft import RaftSettings

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)
WATCH_S = 3.0


class FullDiskFile:
    def __init__(self, file) -> None:
        self._file = file

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._file, name)


async def test_a_follower_that_cannot_store_the_leaders_snapshot_says_so_once(tmp_path, monkeypatch, caplog):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        leader, follower = await all_started(addrs, live, start)
        follower_dir = follower.data_dir
        follower_addr = await wipe_and_compact_past(follower, leader, stop)

        full = [True]

        def open_on_a_full_disk(path, mode="r", *args, **kwargs):
            file = builtins.open(path, mode, *args, **kwargs)
            if full[0] and "w" in mode and str(path).startswith(follower_dir):
                return FullDiskFile(file)
            return file

        monkeypatch.setattr(snapshot_receive, "open", open_on_a_full_disk, raising=False)
        with caplog.at_level(logging.WARNING):
            rejoined = start(follower_addr)
            await asyncio.sleep(WATCH_S)
        failures = [r for r in caplog.records if "writing a snapshot from the leader" in r.getMessage()]
        assert len(failures) == 1, f"{len(failures)} failed transfers logged in {WATCH_S} s"
        assert all(r.exc_info is None for r in failures)

        full[0] = False
        await wait_until(lambda: rejoined.peek_local(lambda state: state.values.get("k39")) == 39,
                         "the follower to install the snapshot once the disk takes it", timeout_s=15.0)
