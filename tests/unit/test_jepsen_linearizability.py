"""The WGL search alone, on a register and on the timer-key model."""

from __future__ import annotations

from jepsen.timer_checkers import timer_step
from jepsen.linearizability import INVALID, KeyOperation, check_key


def register_step(state, op):
    if op.kind == "write":
        return op.args["value"]
    return state if op.args["value"] == state else INVALID


def op(i, call, ret, kind, **args):
    return KeyOperation(i, call, ret, kind, args)


def test_sequential_register_history_is_linearizable():
    ops = [op(0, 0, 1, "write", value=1), op(1, 2, 3, "read", value=1)]
    assert check_key(ops, None, register_step).linearizable is True


def test_stale_read_after_a_completed_write_is_not_linearizable():
    ops = [op(0, 0, 1, "write", value=1), op(1, 2, 3, "write", value=2), op(2, 4, 5, "read", value=1)]
    result = check_key(ops, None, register_step)
    assert result.linearizable is False
    assert result.stuck_on == 2


def test_concurrent_write_may_take_effect_before_or_after_a_read():
    ops = [op(0, 0, 10, "write", value=1), op(1, 1, 2, "read", value=None), op(2, 3, 4, "read", value=1)]
    assert check_key(ops, None, register_step).linearizable is True


def test_reads_cannot_go_back_in_time():
    ops = [op(0, 0, 10, "write", value=1), op(1, 1, 2, "read", value=1), op(2, 3, 4, "read", value=None)]
    assert check_key(ops, None, register_step).linearizable is False


def test_an_operation_that_never_returned_may_be_left_out_or_placed_late():
    write = op(0, 0, None, "write", value=1)
    assert check_key([write, op(1, 5, 6, "read", value=None)], None, register_step).linearizable is True
    assert check_key([write, op(1, 5, 6, "read", value=1)], None, register_step).linearizable is True
    both = [write, op(1, 5, 6, "read", value=1), op(2, 7, 8, "read", value=None)]
    assert check_key(both, None, register_step).linearizable is False


def test_budget_exhaustion_is_unknown_not_a_pass():
    ops = [op(i, 0, 100, "write", value=i) for i in range(12)] + [op(12, 101, 102, "read", value=-1)]
    result = check_key(ops, None, register_step, budget=50)
    assert result.linearizable is None


def test_timer_model_cancel_races_fire():
    schedule = op(0, 0, 1, "schedule", txn="a", outcome="scheduled")
    fire = op(1, 0, 50, "fire", txn="a")
    cancel_absent = op(2, 10, 20, "cancel", txn=None, outcome="absent")
    assert check_key([schedule, fire, cancel_absent], None, timer_step).linearizable is True
    cancel_removed = op(2, 10, 20, "cancel", txn="a", outcome="cancelled")
    assert check_key([schedule, fire, cancel_removed], None, timer_step).linearizable is False
