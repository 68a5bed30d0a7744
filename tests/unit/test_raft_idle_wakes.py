"""What keeps an idle group cheap without making anything late: the tick loop's wake-up (no task per
wait, a schedule still wakes a loop that sleeps with no timer pending), the follower's longer poll
(never past its election deadline), and the meta store that does not rewrite unchanged bytes."""

from __future__ import annotations

import asyncio
import math
import os
import time

import pytest

from queen_raft.raft.follower_poll import FOLLOWER_POLL_PERIODS, follower_poll_s
from queen_raft.raft.journal import GroupCommitJournal
from queen_raft.raft.settings import RaftSettings
from queen_raft.raft.tick import LEADERSHIP_WATCH_S, TickLoop, TickView, Wait, decide
from queen_raft.raft.wake_flag import WakeFlag

# Far below LEADERSHIP_WATCH_S (1 s): a wake that came from the timeout would take that long.
PROMPT_S = 0.3


# -- WakeFlag ------------------------------------------------------------------------------------

async def test_a_wait_returns_at_once_when_the_flag_is_already_set():
    flag = WakeFlag(asyncio.get_running_loop())
    flag.set()
    started = time.monotonic()
    await flag.wait(10.0)
    assert time.monotonic() - started < PROMPT_S


async def test_set_during_a_wait_ends_it_at_once_and_clear_rearms_it():
    flag = WakeFlag(asyncio.get_running_loop())
    asyncio.get_running_loop().call_later(0.02, flag.set)
    started = time.monotonic()
    await flag.wait(10.0)
    assert time.monotonic() - started < PROMPT_S
    flag.clear()
    started = time.monotonic()
    await flag.wait(0.05)  # cleared: only the timeout ends it
    assert 0.04 <= time.monotonic() - started < PROMPT_S


async def test_a_set_from_another_thread_ends_the_wait():
    loop = asyncio.get_running_loop()
    flag = WakeFlag(loop)
    loop.run_in_executor(None, lambda: (time.sleep(0.02), loop.call_soon_threadsafe(flag.set)))
    started = time.monotonic()
    await flag.wait(10.0)
    assert time.monotonic() - started < PROMPT_S


async def test_a_cancelled_wait_raises_and_leaves_no_timer_behind():
    loop = asyncio.get_running_loop()
    flag = WakeFlag(loop)
    task = loop.create_task(flag.wait(10.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert flag._waiter is None
    flag.set()  # no waiter left to set: nothing raises


# -- the tick loop with nothing pending ------------------------------------------------------------

def test_a_leader_with_no_timer_waits_for_the_leadership_watch_and_any_timer_wakes_it():
    view = TickView(leading=True, more_due=False, next_due_ms=None, now_ms=1_000_000, loop_now_s=5.0,
                    last_tick_s=-math.inf, in_flight=0)
    decision = decide(view, 50, 0.005)
    assert decision == Wait(LEADERSHIP_WATCH_S, view.now_ms + LEADERSHIP_WATCH_S * 1000)
    # A timer due at any instant before the wait ends is below the signal bound.
    assert decision.wake_below_ms > view.now_ms + LEADERSHIP_WATCH_S * 1000 - 1


def test_a_pending_timer_still_caps_the_wait_at_tick_ms():
    view = TickView(leading=True, more_due=False, next_due_ms=1_000_000 + 86_400_000, now_ms=1_000_000,
                    loop_now_s=5.0, last_tick_s=-math.inf, in_flight=0)
    assert decide(view, 50, 0.005) == Wait(0.05, view.now_ms + 50)


async def test_a_schedule_wakes_a_leader_sleeping_with_no_timer_at_once():
    """The loop sleeps up to LEADERSHIP_WATCH_S with nothing pending; an apply that adds a timer due
    now (note_applied, from the tick thread) must make it propose a tick well before that."""
    due = {"at": None}
    proposed = []

    async def propose_tick(command, timeout_s):
        proposed.append(time.monotonic())
        due["at"] = None  # the tick fired it
        return {"fired": 1, "moreDue": False}

    tick_loop = TickLoop("t", RaftSettings(), is_leader=lambda: True, next_due_at=lambda: due["at"],
                         observe_leadership=lambda: None, propose_tick=propose_tick,
                         report_result=lambda result: None)
    loop = asyncio.get_running_loop()
    tick_loop.start(loop)
    try:
        await asyncio.sleep(0.1)  # the loop has looked, found no timer, and sleeps
        assert proposed == []
        assert tick_loop._signal_below_ms > time.time() * 1000 + 500  # sleeping long, not tick_ms

        def apply_a_due_timer() -> None:  # the tick thread's apply
            due["at"] = int(time.time() * 1000)
            tick_loop.note_applied(due["at"])

        scheduled = time.monotonic()
        await loop.run_in_executor(None, apply_a_due_timer)
        for _ in range(100):
            if proposed:
                break
            await asyncio.sleep(0.005)
        assert proposed, "the tick loop slept through a timer that fell due"
        assert proposed[0] - scheduled < PROMPT_S
    finally:
        await tick_loop.stop()


# -- the follower's poll -----------------------------------------------------------------------------

@pytest.mark.parametrize("period_s", [0.05, 0.01, 0.2])
def test_a_follower_that_hears_its_leader_polls_longer_but_never_past_its_election_deadline(period_s):
    assert follower_poll_s(period_s, True, 10.0) == pytest.approx(FOLLOWER_POLL_PERIODS * period_s)
    assert follower_poll_s(period_s, True, 1.5 * period_s) == pytest.approx(1.5 * period_s)
    # A deadline inside the period (or past): the stock period, as stock polls.
    assert follower_poll_s(period_s, True, 0.5 * period_s) == period_s
    assert follower_poll_s(period_s, True, -1.0) == period_s


def test_a_leader_a_candidate_and_a_follower_without_a_leader_poll_as_stock():
    assert follower_poll_s(0.05, False, 10.0) == 0.05
    assert follower_poll_s(0.0, True, 10.0) == 0.0  # a manual tick that must not wait


# -- the meta store ----------------------------------------------------------------------------------

def test_an_unchanged_meta_is_not_written_again_and_a_change_is(tmp_path, monkeypatch):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    storer = journal._FileJournal__metaStorer
    writes = []
    real_write = storer._write
    monkeypatch.setattr(storer, "_write", lambda meta: (writes.append(dict(meta)), real_write(meta)))
    journal.setCurrentTerm(3, "127.0.0.1:1")
    assert len(writes) == 1
    for _ in range(3):  # a follower's heartbeats: the same commit index, marked unsaved each time
        journal.setRaftCommitIndex(1)
        journal.onOneSecondTimer()
    assert len(writes) == 2  # the first save of the commit index; the repeats are left out
    journal.setRaftCommitIndex(2)
    journal.onOneSecondTimer()
    assert len(writes) == 3 and writes[-1]["raftCommitIndex"] == 2
    with open(str(tmp_path / "j.meta"), "rb") as f:
        assert f.read()  # on disk as last written
    journal._destroy()


def test_a_store_that_failed_is_written_again_even_if_the_meta_is_the_same(tmp_path, monkeypatch):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    storer = journal._FileJournal__metaStorer
    journal.setCurrentTerm(3, None)
    real_write = storer._write
    failing = [True]

    def flaky_write(meta):
        if failing[0]:
            raise PermissionError("not a disk-full error: raised to pysyncobj")
        real_write(meta)

    monkeypatch.setattr(storer, "_write", flaky_write)
    meta = dict(journal._FileJournal__meta, currentTerm=4)
    with pytest.raises(PermissionError):
        storer.storeMeta(meta)
    failing[0] = False
    os.remove(str(tmp_path / "j.meta"))
    storer.storeMeta(meta)  # the same meta as the failed store: written, not left out
    assert os.path.exists(str(tmp_path / "j.meta"))
    journal._destroy()
