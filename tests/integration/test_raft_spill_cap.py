"""A follower whose full disk outlasts the memory kept for waiting records (journal_spill.py's
SPILL_MAX_BYTES) stops taking entries from the leader, and says so at a bounded rate: the leader
re-sends the entries at every heartbeat for as long as the disk stays full, and each refused append
raised out of pysyncobj's tick, which logged a traceback per message. The rest of the group goes on
committing, and the follower catches up once the disk takes writes again.

Three TenantGroups in this process on real sockets; the follower's journal is made full by making
its file's growth raise ENOSPC, and the cap is lowered to a few entries.
"""

from __future__ import annotations

import asyncio
import errno
import logging

import pytest
from inprocess_groups import all_started, three_members, wait_until

import queen_raft.raft.journal_spill as journal_spill
from queen_raft.raft import RaftSettings

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings()
VALUE = "v" * 2000
WATCH_S = 2.0


async def test_a_follower_past_its_spill_cap_refuses_entries_quietly_and_catches_up(tmp_path, monkeypatch, caplog):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        leader, follower = await all_started(addrs, live, start)
        await leader.propose({"op": "set", "key": "before", "value": 0})
        await wait_until(lambda: follower.peek_local(lambda state: state.values.get("before")) == 0, "the follower")

        journal_file = follower._syncobj._SyncObj__raftLog._FileJournal__journalFile
        full = [True]
        grow = journal_file.ensure_capacity

        def ensure_capacity(end):
            if full[0]:
                raise OSError(errno.ENOSPC, "No space left on device")
            return grow(end)

        monkeypatch.setattr(journal_file, "ensure_capacity", ensure_capacity)
        monkeypatch.setattr(journal_spill, "SPILL_MAX_BYTES", 8 * len(VALUE))
        journal_file.capacity = 0  # every append needs the file to grow
        with caplog.at_level(logging.WARNING):
            for i in range(40):
                await leader.propose({"op": "set", "key": f"k{i}", "value": VALUE})
            await wait_until(lambda: follower.status()["diskFull"], "the follower to name its fault")
            await asyncio.sleep(WATCH_S)  # the leader re-sends what the follower refused, again and again
        assert leader.is_leader and follower.status()["appendEntries"]["refusedDiskFull"] >= 1
        tracebacks = [r for r in caplog.records if r.exc_info is not None]
        assert len(tracebacks) <= 1, f"{len(tracebacks)} tracebacks in {WATCH_S} s"
        assert caplog.text.count("cannot write") <= 2

        full[0] = False
        await wait_until(lambda: follower.peek_local(lambda state: state.values.get("k39")) == VALUE,
                         "the follower to catch up once the disk takes writes", timeout_s=15.0)
        assert not follower.status()["diskFull"]
