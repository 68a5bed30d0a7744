"""A leader whose snapshot file is gone (deleted by hand, lost with a sector) still brings a wiped
follower back: it writes a new snapshot from its state in memory and sends that, logging the loss
once. Without that it logged a traceback at every heartbeat ("could not open the snapshot") and the
follower, which needs a snapshot since the leader's log was compacted, never caught up.

Three TenantGroups in this process on real sockets.
"""

from __future__ import annotations

import asyncio
import logging
import os

import pytest
from inprocess_groups import all_started, three_members, wait_until, wipe_and_compact_past

from queen_raft.raft import RaftSettings

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)


async def test_a_wiped_follower_catches_up_from_a_leader_whose_snapshot_file_is_gone(tmp_path, caplog):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        leader, follower = await all_started(addrs, live, start)
        follower_addr = await wipe_and_compact_past(follower, leader, stop)
        # The members compact once more when the log goes quiet (quiet_compaction.py): let that pass.
        await asyncio.sleep(3.0)
        assert not leader._syncobj._SyncObj__serializer.writing
        os.remove(leader.full_dump_file)
        with caplog.at_level(logging.WARNING):
            rejoined = start(follower_addr)
            await wait_until(lambda: rejoined.peek_local(lambda state: state.values.get("k39")) == 39,
                             "the wiped follower to catch up", timeout_s=15.0)
        tracebacks = [r for r in caplog.records if r.exc_info is not None]
        assert tracebacks == []
        assert caplog.text.count("not sending the snapshot") == 1
