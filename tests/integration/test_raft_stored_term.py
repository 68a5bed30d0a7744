"""A member whose meta store fails (its journal still writes) takes no newer term until it can store
it: it neither follows nor acknowledges a leader of a term its disk does not hold, so a restart
could never put it back in an older term than one it acted in. The group goes on with the others;
once the store works again the member follows and catches up. Meanwhile its status (`termStore`),
/health (`term_not_stored`) and /metrics (`queen_raft_term_store_failing`) name the fault, and
the first store that succeeds clears it.

Three TenantGroups in this process on real sockets. The fault is the meta's write raising EACCES
(a data dir whose permissions no longer allow the rename the store does), its journal untouched.
"""

from __future__ import annotations

import asyncio
import errno
import time
from types import SimpleNamespace

import pytest
from inprocess_groups import all_started, leader_of, scraped_series, three_members, wait_until

from queen_raft.api.health import ApplyWatch, health_body
from queen_raft.raft import GroupUnavailable, RaftSettings
from queen_raft.raft.journal_storage import load_meta

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(commit_timeout_ms=3000)


def stored_term(group) -> int:
    storer = group._syncobj._SyncObj__raftLog._FileJournal__metaStorer
    return load_meta(storer.getPath()).get("currentTerm", 0)


def health_problem(group) -> str | None:
    """The member's group in this node's /health answer, as an operator reads it."""
    serving = SimpleNamespace(groups={"t": group}, node_id="n", config=SimpleNamespace(name="test"))
    return health_body(serving, ApplyWatch())["groups"]["t"]["problem"]


def scraped_term_store_series(group) -> dict[str, float]:
    return scraped_series(group, "t", "queen_raft_term_store")


async def test_a_member_that_cannot_store_a_new_term_neither_follows_nor_acknowledges_in_it(tmp_path, monkeypatch):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        leader, broken = await all_started(addrs, live, start)
        await leader.propose({"op": "set", "key": "before", "value": 1})
        await wait_until(lambda: broken.peek_local(lambda state: state.values.get("before")) == 1, "the member to apply")
        term_at_fault = broken.status()["term"]
        assert stored_term(broken) == term_at_fault
        assert broken.status()["termStore"] == {"failed": 0, "failing": False, "failingSinceMs": None,
                                                "lastError": None}
        assert health_problem(broken) is None

        storer = broken._syncobj._SyncObj__raftLog._FileJournal__metaStorer

        def no_rename(meta):
            raise OSError(errno.EACCES, "Permission denied")

        monkeypatch.setattr(storer, "_write", no_rename)
        fault_ms = int(time.time() * 1000)
        # A new term without the broken member: the leader restarts, and it and the third member
        # elect one of them (the broken member's vote cannot be stored, so it is never given).
        await stop(leader.self_addr)
        start(leader.self_addr)
        others = lambda: [group for group in live.values() if group is not broken]  # noqa: E731
        await wait_until(lambda: leader_of(others()) is not None and leader_of(others()).status()["term"] > term_at_fault,
                         "a leader of a newer term", timeout_s=20.0)
        new_leader = leader_of(others())
        await new_leader.propose({"op": "set", "key": "after", "value": 3})
        await asyncio.sleep(1.0)  # twenty heartbeats of the new term reach the broken member

        assert broken.status()["term"] == term_at_fault == stored_term(broken)
        assert broken.peek_local(lambda state: state.values.get("after")) is None
        # What the operator sees while the store fails: the flag since the first failure, with its error.
        failing = broken.status()["termStore"]
        assert failing["failing"] and failing["failed"] >= 1, failing
        assert fault_ms <= failing["failingSinceMs"] <= int(time.time() * 1000), failing
        assert "Permission denied" in failing["lastError"], failing
        assert health_problem(broken) == "term_not_stored"
        assert all(health_problem(group) is None for group in others())
        series = scraped_term_store_series(broken)
        assert series["queen_raft_term_store_failing"] == 1.0
        assert series["queen_raft_term_stores_failed_total"] >= failing["failed"]
        await wait_until(lambda: broken.status()["termStore"]["failed"] > failing["failed"],
                         "the next heartbeat of the new term to be refused too")
        assert broken.status()["termStore"]["failingSinceMs"] == failing["failingSinceMs"]  # one episode
        # Why /health must say so: the member names the new leader, yet a read through it waits for
        # a barrier it never applies.
        assert broken.status()["leader"] == new_leader.self_addr
        with pytest.raises(GroupUnavailable) as refused:
            await broken.read(lambda state: state.values.get("after"))
        assert refused.value.reason == "timeout"

        monkeypatch.undo()
        await wait_until(lambda: broken.peek_local(lambda state: state.values.get("after")) == 3,
                         "the member to follow the new term and catch up", timeout_s=15.0)
        assert broken.status()["term"] == new_leader.status()["term"] == stored_term(broken)
        # The first store that succeeded cleared the flag; the count since start stays.
        recovered = broken.status()["termStore"]
        assert recovered["failed"] > failing["failed"], recovered
        assert recovered | {"failed": 0} == {"failed": 0, "failing": False, "failingSinceMs": None, "lastError": None}
        assert health_problem(broken) is None
        assert scraped_term_store_series(broken)["queen_raft_term_store_failing"] == 0.0
