"""A transaction's cancel with requirePending: the timer must be pending, or the whole transaction
rolls back with reason timer_not_pending and the cancel's index."""

from __future__ import annotations

from queen_raft.state import TenantState

from tests.unit.test_state_transaction import T0, schedule, transaction, unchanged_but_clock


def cancel(key: str, require_pending: object = None) -> dict:
    op = {"op": "cancel", "queue": "tq", "timerKey": key, "txn": None}
    if require_pending is not None:
        op["requirePending"] = require_pending
    return op


def test_a_required_cancel_of_a_pending_timer_commits_with_the_rest():
    state = TenantState()
    transaction(state, T0, timers=[schedule("hold")])
    answer = transaction(state, T0 + 1, kv=[{"op": "put", "ns": "n", "key": "k", "value": "paid"}],
                         timers=[cancel("hold", True)])
    assert answer["success"] is True
    assert answer["results"][1]["status"] == "cancelled"
    assert state.peek_timer("tq", "hold") is None
    assert state.kv_get("n", "k")["value"] == "paid"


def test_a_required_cancel_of_a_fired_timer_rolls_everything_back():
    state = TenantState()
    transaction(state, T0, timers=[schedule("hold", delay=0)])  # due at once: fired in the same entry
    assert state.peek_timer("tq", "hold") is None
    answer = unchanged_but_clock(state, T0 + 5, lambda s: transaction(
        s, T0 + 5, kv=[{"op": "put", "ns": "n", "key": "k", "value": "paid"}],
        timers=[schedule("other"), cancel("hold", True)]))
    assert answer["reason"] == "timer_not_pending"
    assert answer["index"] == 2  # kv[0] is 0, timers[0] is 1, timers[1] is 2
    assert "tq/hold" in answer["error"]


def test_without_require_pending_an_absent_cancel_commits_as_before():
    state = TenantState()
    for flag in (None, False):
        answer = transaction(state, T0, kv=[{"op": "put", "ns": "n", "key": "k", "value": 1}],
                             timers=[cancel("never", flag)])
        assert answer["success"] is True
        assert answer["results"][1]["status"] == "absent"


def test_a_non_boolean_require_pending_is_bad_request():
    state = TenantState()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(s, T0, timers=[cancel("x", "yes")]))
    assert answer["reason"] == "bad_request"
    assert answer["index"] == 0
