"""The timers workload's operations through POST /api/v1/transaction (jepsen/workloads/timer_transactions.py):
their answers are read at the timer op's index, and the timer and consumer checkers judge them as
they judge the timer routes' (an info transaction may or may not have applied, a refused one did not)."""

from __future__ import annotations

from jepsen.client import Outcome
from jepsen.history import FAIL, INFO, OK, pair_operations
from jepsen.queue_checkers import check_queue_consumption
from jepsen.workloads.timer_transactions import key_of, next_key, normalized_at
from jepsen.workloads.timers import normalize_cancel, normalize_schedule
from test_jepsen_checkers import BASE, GROUP, QUEUE, Script, failing, record

ACK_RESULT = {"index": 0, "success": True, "dlq": False}


def cancel_answer(status: str, txn: str | None, offset: int | None = None) -> dict:
    answer = {"ok": status == "cancelled", "status": status, "queue": QUEUE, "timerKey": "k", "txn": txn,
              "requestTxn": None}
    if status == "fired":
        answer.update(partition="Default", offset=offset, messageId=f"m-{txn}")
    return answer


def txn_cancel(script: Script, key: str, start: int, end: int | None, body: dict | None, type_: str = OK,
               acks: tuple[tuple[str, int], ...] = ()) -> None:
    """A cancel sent in a transaction (after `acks`, when given: the consumers' txn-ack form)."""
    if type_ == OK:
        type_, answer = normalized_at(normalize_cancel, len(acks))(Outcome(OK, 200, body))
    else:
        answer = {"status": None, "body": {"error": "timeout"}} if end is not None else None
    value = {"key": key, "via": "txn"}
    if acks:
        value = {"key": key, "via": "txn-ack", "queue": QUEUE, "group": GROUP, "leaseId": "l",
                 "items": [{"txn": txn, "offset": offset} for txn, offset in acks]}
    script.op("cancel", value, type_, answer, start, end)


def txn_schedule(script: Script, key: str, txn: str, start: int, end: int | None, deliver_at: int,
                 type_: str = OK, body: dict | None = None) -> None:
    answer = None
    if type_ == OK:
        body = body or {"success": True, "results": [{"ok": True, "status": "scheduled", "queue": QUEUE,
                                                      "timerKey": key, "txn": txn, "messageId": f"m-{txn}",
                                                      "deliverAt": BASE + deliver_at}]}
        type_, answer = normalized_at(normalize_schedule, 0)(Outcome(OK, 200, body))
    script.op("schedule", {"key": key, "txn": txn, "delayMs": 0, "op": "schedule", "via": "txn"}, type_, answer,
              start, end)


def consumption(script: Script, log: list[dict]) -> dict:
    return check_queue_consumption(pair_operations(script.ordered()), log, QUEUE)


def fired_then_acked_in_a_transaction(cancel_body: dict) -> tuple[Script, list[dict]]:
    """k-1 fires at offset 0 and is popped; the consumer acks it in a transaction that cancels k."""
    s = Script()
    s.schedule("k", "k-1", 1000, 1010, deliver_at=1100)
    s.pop(1120, 1200, [("k-1", 0)])
    txn_cancel(s, "k", 1210, 1220, cancel_body, acks=(("k-1", 0),))
    s.peek("k", 9000, 9010, None, final=True)
    return s, [record(0, "k-1", 1150)]


def test_the_timer_result_is_read_after_the_acks():
    body = {"success": True, "results": [ACK_RESULT, cancel_answer("cancelled", "k-3")]}
    type_, answer = normalized_at(normalize_cancel, 1)(Outcome(OK, 200, body))
    assert type_ == OK and answer["result"]["status"] == "cancelled" and answer["result"]["txn"] == "k-3"


def test_a_refused_transaction_is_a_fail_and_an_odd_body_is_info():
    refused = {"success": False, "reason": "rejected_ack", "error": "the lease does not cover this message", "index": 0}
    type_, answer = normalized_at(normalize_cancel, 1)(Outcome(OK, 200, refused))
    assert type_ == FAIL and answer["body"]["reason"] == "rejected_ack"
    assert normalized_at(normalize_cancel, 1)(Outcome(OK, 200, {"success": True, "results": [ACK_RESULT]}))[0] == INFO
    assert normalized_at(normalize_cancel, 0)(Outcome(INFO, None, {"error": "timeout"}))[0] == INFO


def test_a_txn_key_names_its_timer_key():
    assert key_of("t11-42") == "t11" and key_of("x-a-7") == "x-a"
    assert next_key("t3", 12) == "t4" and next_key("t11", 12) == "t0"


def test_a_true_fired_answer_from_a_transaction_passes_every_property():
    script, log = fired_then_acked_in_a_transaction(
        {"success": True, "results": [ACK_RESULT, cancel_answer("fired", "k-1", 0)]})
    results = script.check_timers(log)
    assert failing(results) == set()
    assert results["fired_answers_name_the_log"]["fired_answers"] == 1
    assert failing(consumption(script, log)) == set()


def test_a_fired_answer_from_a_transaction_naming_another_offset_is_caught():
    script, log = fired_then_acked_in_a_transaction(
        {"success": True, "results": [ACK_RESULT, cancel_answer("fired", "k-1", 5)]})
    assert failing(script.check_timers(log)) == {"fired_answers_name_the_log"}


def test_an_absent_answer_from_a_transaction_after_the_fire_passes():
    script, log = fired_then_acked_in_a_transaction(
        {"success": True, "results": [ACK_RESULT, cancel_answer("absent", None)]})
    assert failing(script.check_timers(log)) == set()


def test_an_absent_answer_from_a_transaction_while_a_timer_is_pending_is_not_linearizable():
    s = Script()
    s.schedule("k", "k-1", 1000, 1010, deliver_at=60_000)
    txn_cancel(s, "k", 1100, 1110, {"success": True, "results": [cancel_answer("absent", None)]})
    s.peek("k", 1200, 1210, "k-1", deliver_at=60_000)
    assert "linearizable_per_key" in failing(s.check_timers([]))


def test_a_fire_after_a_cancelled_answer_from_a_transaction_is_caught():
    s = Script()
    s.schedule("k", "k-1", 1000, 1010, deliver_at=3000)
    txn_cancel(s, "k", 1100, 1110, {"success": True, "results": [cancel_answer("cancelled", "k-1")]})
    s.peek("k", 9000, 9010, None, final=True)
    results = s.check_timers([record(0, "k-1", 3010)])
    assert results["no_fire_after_acknowledged_cancel"]["valid"] is False
    assert results["no_fire_after_acknowledged_cancel"]["acknowledged_removals"] == 1


def test_an_info_ack_and_cancel_may_or_may_not_have_applied():
    for fired in (True, False):
        s = Script()
        s.schedule("k", "k-1", 1000, 1010, deliver_at=3000)
        s.schedule("j", "j-1", 1000, 1010, deliver_at=1100)
        s.pop(1120, 1200, [("j-1", 0)])
        txn_cancel(s, "k", 1210, 1400, None, type_=INFO, acks=(("j-1", 0),))
        s.peek("k", 9000, 9010, None, final=True)
        s.peek("j", 9000, 9010, None, final=True)
        log = [record(0, "j-1", 1150)] + ([record(1, "k-1", 3010)] if fired else [])
        if fired:
            s.pop(5000, 5100, [("k-1", 1)])  # past offset 0, which the info transaction may have acked
        assert failing(s.check_timers(log)) == set(), fired
        assert failing(consumption(s, log)) == set(), fired


def test_a_refused_ack_and_cancel_applied_nothing():
    s = Script()
    s.schedule("k", "k-1", 1000, 1010, deliver_at=3000)
    s.schedule("j", "j-1", 1000, 1010, deliver_at=1100)
    s.pop(1120, 1200, [("j-1", 0)])
    refused = {"success": False, "reason": "rejected_ack", "error": "lease expired", "index": 0}
    txn_cancel(s, "k", 1210, 1220, refused, acks=(("j-1", 0),))
    s.pop(5000, 5100, [("k-9", 1)])  # starts past offset 0, which nothing acked
    s.peek("k", 9000, 9010, None, final=True)
    log = [record(0, "j-1", 1150), record(1, "k-9", 4000)]
    assert "no_lost_timers" in failing(s.check_timers(log))  # the refused cancel excuses nothing
    assert consumption(s, log)["pop_never_skips_unacked"]["valid"] is False


def test_an_acknowledged_ack_in_a_transaction_is_completed():
    script, log = fired_then_acked_in_a_transaction(
        {"success": True, "results": [ACK_RESULT, cancel_answer("absent", None)]})
    script.pop(1300, 1400, [("k-1", 0)])
    assert consumption(script, log)["no_redelivery_after_completed_ack"]["valid"] is False


def test_schedules_through_a_transaction():
    for fired in (True, False):  # an info schedule may or may not have applied
        s = Script()
        txn_schedule(s, "k", "k-1", 1000, 1300, 1100, type_=INFO)
        s.peek("k", 9000, 9010, None, final=True)
        assert failing(s.check_timers([record(0, "k-1", 1150)] if fired else [])) == set(), fired
    s = Script()
    txn_schedule(s, "k", "k-1", 1000, 1010, 1100)
    s.peek("k", 9000, 9010, None, final=True)
    assert "no_lost_timers" in failing(s.check_timers([]))
    s = Script()
    refused = {"success": False, "reason": "timers_quota_exceeded", "error": "quota"}
    txn_schedule(s, "k", "k-1", 1000, 1010, 1100, body=refused)
    s.peek("k", 9000, 9010, None, final=True)
    assert failing(s.check_timers([record(0, "k-1", 1150)])) == {"no_unexpected_messages"}


def test_a_timer_scheduled_in_a_transaction_that_fires_twice_or_early_is_caught():
    s = Script()
    txn_schedule(s, "k", "k-1", 1000, 1010, 1100)
    s.peek("k", 9000, 9010, None, final=True)
    assert failing(s.check_timers([record(0, "k-1", 1150)])) == set()
    assert "at_most_once" in failing(s.check_timers([record(0, "k-1", 1150), record(1, "k-1", 1160)]))
    early = s.check_timers([record(0, "k-1", 1050)])["floor_not_before_deliverAt"]
    assert early["valid"] is False and early["counterexamples"][0]["kind"] == "created_before_deliverAt"
