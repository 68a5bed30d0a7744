"""The queue consumption checker on histories where a consumer sends an ack again after `info`
(jepsen/workloads/messages.py): a retry answered success is a completed ack, one answered
`invalid_lease` completes nothing."""

from __future__ import annotations

from jepsen.history import INFO, OK, pair_operations
from jepsen.queue_checkers import check_queue_consumption
from test_jepsen_checkers import GROUP, QUEUE, Script, failing, record

LOG = [record(0, "a", 900), record(1, "b", 901)]


def ack_then_retry(s: Script, retry_success: bool) -> None:
    """An ack of offsets 0 and 1 whose answer was lost, then the same call from a new process."""
    value = {"queue": QUEUE, "group": GROUP, "leaseId": "lease-1000",
             "items": [{"txn": "a", "offset": 0}, {"txn": "b", "offset": 1}]}
    s.op("ack", value, INFO, None, 1020, 1030)
    verdict = {"success": True, "dlq": False} if retry_success else \
        {"success": False, "error": "invalid_lease", "dlq": False}
    s.op("ack", {**value, "retry": True}, OK,
         {"status": 200, "results": [{"index": i, **verdict} for i in range(2)]}, 1040, 1050)


def test_a_retried_ack_answered_success_counts_as_completed_and_is_reported():
    s = Script()
    s.pop(1000, 1010, [("a", 0), ("b", 1)])
    ack_then_retry(s, retry_success=True)
    consumption = check_queue_consumption(pair_operations(s.ordered()), LOG, QUEUE)
    assert failing(consumption) == set()
    prop = consumption["no_redelivery_after_completed_ack"]
    assert (prop["retried_acks"], prop["retried_acks_answered_success"]) == (1, 1)


def test_a_redelivery_after_a_retried_ack_answered_success_is_caught():
    s = Script()
    s.pop(1000, 1010, [("a", 0), ("b", 1)])
    ack_then_retry(s, retry_success=True)
    s.pop(1100, 1110, [("b", 1)])
    consumption = check_queue_consumption(pair_operations(s.ordered()), LOG, QUEUE)
    assert consumption["no_redelivery_after_completed_ack"]["valid"] is False


def test_a_redelivery_after_a_retry_refused_invalid_lease_is_allowed():
    s = Script()
    s.pop(1000, 1010, [("a", 0), ("b", 1)])
    ack_then_retry(s, retry_success=False)
    s.pop(5000, 5010, [("a", 0), ("b", 1)])
    consumption = check_queue_consumption(pair_operations(s.ordered()), LOG, QUEUE)
    assert failing(consumption) == set()
    assert consumption["no_redelivery_after_completed_ack"]["retried_acks_answered_success"] == 0
