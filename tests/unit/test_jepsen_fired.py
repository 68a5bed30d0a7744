"""The timers checker's `fired` answers (jepsen/timer_checkers.py): a cancel or a peek answered
`fired` must name the log's message for that txn, and must come after that fire in the key's order."""

from __future__ import annotations

from jepsen.history import OK
from jepsen.workloads import make_workload
from jepsen.workloads.timers import normalize_cancel, normalize_peek
from jepsen.client import Outcome
from test_jepsen_checkers import BASE, Script, failing, record


def fired_cancel(script: Script, key: str, start: int, end: int, txn: str, offset: int,
                 message_id: str | None = None) -> None:
    result = {"ok": False, "status": "fired", "txn": txn, "partition": "Default", "offset": offset,
              "messageId": message_id or f"m-{txn}"}
    script.op("cancel", {"key": key}, OK, {"status": 200, "result": result}, start, end)


def fired_peek(script: Script, key: str, start: int, end: int, txn: str, offset: int) -> None:
    result = {"found": False, "status": "fired", "txn": txn, "partition": "Default", "offset": offset,
              "messageId": f"m-{txn}"}
    script.op("peek", {"key": key}, OK, {"status": 200, "result": result}, start, end)


def fired_script() -> tuple[Script, list[dict]]:
    """k: scheduled, fired at offset 0, popped; a cancel and a peek after it answer fired."""
    s = Script()
    s.schedule("k", "k-1", 1000, 1010, deliver_at=1100)
    s.pop(1120, 1200, [("k-1", 0)])
    s.ack(1210, 1220, [("k-1", 0)])
    fired_cancel(s, "k", 1300, 1310, "k-1", 0)
    fired_peek(s, "k", 1320, 1330, "k-1", 0)
    s.peek("k", 9000, 9010, None, final=True)
    return s, [record(0, "k-1", 1150)]


def test_true_fired_answers_pass_every_property():
    script, log = fired_script()
    results = script.check_timers(log)
    assert failing(results) == set()
    assert results["fired_answers_name_the_log"]["fired_answers"] == 2


def test_a_fired_answer_naming_another_offset_is_caught():
    script, log = fired_script()
    fired_cancel(script, "k", 1400, 1410, "k-1", 7)
    assert failing(script.check_timers(log)) == {"fired_answers_name_the_log"}


def test_a_fired_answer_naming_another_message_id_is_caught():
    script, log = fired_script()
    fired_cancel(script, "k", 1400, 1410, "k-1", 0, message_id="someone-else")
    assert failing(script.check_timers(log)) == {"fired_answers_name_the_log"}


def test_a_fired_answer_before_its_schedule_is_caught():
    script, log = fired_script()
    fired_cancel(script, "k", 10, 20, "k-1", 0)
    assert "fired_answers_name_the_log" in failing(script.check_timers(log))


def test_a_fired_answer_while_a_newer_timer_is_pending_is_not_linearizable():
    script, log = fired_script()
    script.schedule("k", "k-2", 2000, 2010, deliver_at=60_000)
    fired_cancel(script, "k", 2100, 2110, "k-1", 0)  # k-2 is pending: the cancel must remove it
    assert "linearizable_per_key" in failing(script.check_timers(log))


def test_an_absent_answer_forgets_for_good():
    script, log = fired_script()
    script.cancel("k", 1500, 1510, "absent", None)
    fired_cancel(script, "k", 1600, 1610, "k-1", 0)  # a forgotten fire is never remembered again
    assert "linearizable_per_key" in failing(script.check_timers(log))


def test_the_workload_keeps_the_fired_fields():
    answer = {"ok": False, "status": "fired", "queue": "jt", "timerKey": "k", "txn": "k-1", "partition": "Default",
              "offset": 4, "messageId": "m", "firedAt": BASE, "requestTxn": None}
    kind, kept = normalize_cancel(Outcome(OK, 200, answer))
    assert (kind, kept["result"]["status"], kept["result"]["offset"], kept["result"]["messageId"]) == (
        OK, "fired", 4, "m")
    kind, kept = normalize_peek(Outcome(OK, 200, {"found": False, **answer}))
    assert (kind, kept["result"]["status"], kept["result"]["txn"], kept["result"]["offset"]) == (OK, "fired", "k-1", 4)


def test_the_remembered_variant_runs_on_its_own_queue_with_a_dedup_window():
    plain, remembered = make_workload("timers"), make_workload("timers-remembered")
    assert (plain.queues, plain.dedup_window_s) == (["jt"], 0)
    assert (remembered.name, remembered.queues, remembered.dedup_window_s) == ("timers-remembered", ["jtr"], 3600)
    assert [spec.queue for spec in remembered.consumers()] == ["jtr"]
