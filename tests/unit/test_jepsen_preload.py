"""The preloaded state: its calls, and preload_retained judging what the final read found."""

from __future__ import annotations

from jepsen.preload import (OPS_PER_CALL, QUEUE, PreloadReadBack, PreloadResult, batch_count, batch_ops,
                            check_preload_retained, index_of, key_of)


def test_batches_cover_every_index_once_in_key_order():
    count = 3 * OPS_PER_CALL + 5
    keys = [op["timerKey"] for b in range(batch_count(count)) for op in batch_ops(b, count)]
    assert len(keys) == count == len(set(keys))
    assert keys == sorted(keys)  # the list route's order is index order: a short read is a prefix
    assert [index_of(k) for k in keys] == list(range(count))
    op = batch_ops(0, count)[0]
    assert op["queue"] == QUEUE and op["txn"] == op["timerKey"] and op["delayMs"] > 86_400_000


def _stored(requested: int, acked: list[int], runs: list[list[int]], complete: bool = True,
            read_through: int = -1, pending: dict | None = None) -> tuple[dict, dict]:
    result = PreloadResult(requested, acked_batches=acked).to_json()
    read = PreloadReadBack(present_runs=runs, read_through=read_through, complete=complete,
                           pending_by_node=pending or {})
    return result, read.__dict__


def test_everything_acknowledged_still_pending_passes():
    result, read = _stored(1000, [0, 1, 2, 3], [[0, 1000]], pending={"n1": 1000, "n2": 1003, "n3": 1000})
    verdict = check_preload_retained(result, read)
    assert verdict["valid"] is True and verdict["keys_judged"] == 1000 and verdict["missing"] == 0


def test_a_missing_acknowledged_timer_fails_and_is_named():
    result, read = _stored(1000, [0, 1, 2, 3], [[0, 300], [301, 1000]], pending={"n1": 999})
    verdict = check_preload_retained(result, read)
    assert verdict["valid"] is False and verdict["missing"] == 1
    assert {"missing": key_of(300)} in verdict["counterexamples"]
    assert {"node": "n1", "pendingTimers": 999, "acknowledged": 1000} in verdict["counterexamples"]


def test_an_unacknowledged_call_may_be_missing():
    # Batch 1 (indexes 256..511) was never acknowledged: its timers prove nothing either way.
    result, read = _stored(1000, [0, 2, 3], [[0, 256], [512, 1000]])
    assert check_preload_retained(result, read)["valid"] is True


def test_a_node_whose_count_is_short_fails_even_when_the_list_was_whole():
    result, read = _stored(512, [0, 1], [[0, 512]], pending={"n1": 512, "n2": 200, "n3": {"error": "timeout"}})
    verdict = check_preload_retained(result, read)
    assert verdict["valid"] is False and verdict["violations"] == 1
    assert verdict["pending_by_node"] == {"n1": 512, "n2": 200, "n3": "no answer"}


def test_a_read_that_stopped_short_judges_its_prefix_only():
    clean = check_preload_retained(*_stored(1000, [0, 1, 2, 3], [[0, 400]], complete=False, read_through=399))
    assert clean["valid"] is None and clean["keys_judged"] == 400
    lossy = check_preload_retained(*_stored(1000, [0, 1, 2, 3], [[0, 10], [11, 400]], complete=False,
                                            read_through=399))
    assert lossy["valid"] is False and lossy["missing"] == 1
