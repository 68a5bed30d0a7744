"""The overview's per-queue figures (state/summary.py) and the timer list's key-prefix search."""

from __future__ import annotations

from queen_raft.state import TenantState
from queen_raft.state.summary import queue_summaries
from test_state_timers import T0, schedule, timers


def state_with(*rows: tuple[str, str, int]) -> TenantState:
    state = TenantState()
    timers(state, T0, *(schedule(queue, key, delay=delay) for queue, key, delay in rows))
    return state


def test_each_queue_has_its_pending_count_and_its_earliest_due_instant():
    state = state_with(("b", "k1", 9000), ("a", "k1", 5000), ("b", "k2", 3000), ("a", "k2", 7000))
    assert queue_summaries(state) == [
        {"queue": "a", "pendingTimers": 2, "nextDueAt": T0 + 5000, "unsettledMessages": 0, "dlqCount": 0},
        {"queue": "b", "pendingTimers": 2, "nextDueAt": T0 + 3000, "unsettledMessages": 0, "dlqCount": 0},
    ]


def test_a_queue_past_the_bounded_walk_says_how_far_the_walk_went():
    state = state_with(("early", "e1", 1000), ("early", "e2", 2000), ("early", "e3", 3000), ("late", "l1", 9000))
    rows = {row["queue"]: row for row in queue_summaries(state, scan=2)}
    assert rows["early"]["nextDueAt"] == T0 + 1000
    assert rows["late"]["nextDueAt"] is None and rows["late"]["nextDueAfter"] == T0 + 2000
    assert rows["late"]["pendingTimers"] == 1


def test_fired_messages_count_as_unsettled_and_dead_letters_per_queue():
    state = state_with(("q", "k", 10))
    state.apply({"op": "tick", "now": T0 + 50})
    assert queue_summaries(state) == [
        {"queue": "q", "pendingTimers": 0, "nextDueAt": None, "unsettledMessages": 1, "dlqCount": 0}]


def test_the_list_with_a_prefix_pages_only_the_keys_that_start_with_it():
    state = state_with(*(("q", key, 5000) for key in ("a", "ab-1", "ab-2", "ab-3", "abc", "b", "ab")))
    first = state.list_timers("q", None, 2, prefix="ab-")
    assert [row["timerKey"] for row in first["rows"]] == ["ab-1", "ab-2"] and first["truncated"]
    second = state.list_timers("q", first["nextAfter"], 2, prefix="ab-")
    assert [row["timerKey"] for row in second["rows"]] == ["ab-3"] and not second["truncated"]
    assert second["nextAfter"] is None
    assert [row["timerKey"] for row in state.list_timers("q", None, 10, prefix="ab")["rows"]] == [
        "ab", "ab-1", "ab-2", "ab-3", "abc"]
    assert state.list_timers("q", None, 10, prefix="zz")["rows"] == []
