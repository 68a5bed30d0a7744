"""A leader whose data dir turns read-only (EROFS: a filesystem remounted read-only after errors, or
a dir an operator made unwritable) degrades as on a full disk: it steps down and stands for no
election, names the fault in its status (`diskFull`, /health `disk_full`), and the others go on
committing; once the dir is writable again it catches up. Without that, the write error raised out
of every tick: the node kept leading (its heartbeats went out before the append that raised), every
write to the group timed out, and each tick logged a traceback.

Three TenantGroups in this process on real sockets; the leader's files are made read-only by
making its journal's growth and its meta's store raise EROFS (a real read-only remount needs a
device this test cannot have).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
import traceback

import pytest
from inprocess_groups import all_started, leader_of, three_members, wait_until

from queen_raft.raft import GroupUnavailable, RaftSettings

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(commit_timeout_ms=2000)


class ReadOnly:
    """The journal file and the meta of one member answer EROFS while `on`."""

    def __init__(self, journal, monkeypatch) -> None:
        self.on = False
        journal_file = journal._FileJournal__journalFile
        storer = journal._FileJournal__metaStorer
        grow, store = journal_file.ensure_capacity, storer._write

        def ensure_capacity(end):
            if self.on:
                raise OSError(errno.EROFS, "Read-only file system")
            return grow(end)

        def write_meta(meta):
            if self.on:
                raise OSError(errno.EROFS, "Read-only file system")
            return store(meta)

        monkeypatch.setattr(journal_file, "ensure_capacity", ensure_capacity)
        monkeypatch.setattr(storer, "_write", write_meta)
        # Every append needs the file to grow from here on, as every write would fail on such a dir.
        journal_file.capacity = 0


async def propose_somewhere(live, command: dict):
    """Propose through whichever member leads now, until one commits it."""
    async def attempt():
        leader = leader_of(list(live.values()))
        if leader is None:
            return None
        try:
            return await leader.propose(command)
        except GroupUnavailable:
            return None
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        result = await attempt()
        if result is not None:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"no member committed {command}")


async def test_a_leader_whose_data_dir_turns_read_only_steps_down_and_the_group_goes_on(tmp_path, monkeypatch, caplog):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        broken, _ = await all_started(addrs, live, start)
        await broken.propose({"op": "set", "key": "before", "value": 1})
        read_only = ReadOnly(broken._syncobj._SyncObj__raftLog, monkeypatch)
        term_at_fault = broken.status()["term"]
        read_only.on = True
        with caplog.at_level(logging.ERROR):
            try:  # committed by the two others or refused: either is right, as on a full disk
                await broken.propose({"op": "set", "key": "first", "value": 2})
            except GroupUnavailable:
                pass
            await wait_until(lambda: broken.status()["diskFull"], "the broken member to name its fault")
            await wait_until(lambda: not broken.is_leader, "the broken leader to step down")
            await propose_somewhere(live, {"op": "set", "key": "after", "value": 3})
            new_leader = leader_of(list(live.values()))
            assert new_leader is not None and new_leader is not broken
            await asyncio.sleep(2.0)  # some forty heartbeats of the new leader
        # A persistent fault is logged when it starts, not at every tick or message. Only what the
        # member cannot store raises in pysyncobj's message handler: a new term, once (the term stays
        # in memory, so later messages of it do not raise again; the member sends nothing of it), and
        # a vote in that term, once per candidate that asks after the first (the vote is not sent).
        # Two candidates of one term: at most two per term.
        terms_since = new_leader.status()["term"] - term_at_fault
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert all("setCurrentTerm" in "".join(traceback.format_tb(r.exc_info[2])) for r in tracebacks)
        assert len(tracebacks) <= 2 * terms_since
        assert caplog.text.count("cannot write") <= 2

        read_only.on = False
        await wait_until(lambda: not broken.status()["diskFull"], "the member to take writes again")
        await wait_until(lambda: broken.peek_local(lambda state: state.values.get("after")) == 3,
                         "the member to catch up", timeout_s=15.0)
