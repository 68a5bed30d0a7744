"""The fault checkers on synthetic histories: each violation must be caught, clean ones must pass.

Times below are milliseconds after BASE on both the monotonic and the wall clock.
"""

from __future__ import annotations

from jepsen.queue_checkers import check_pushes, check_queue_consumption
from jepsen.timer_checkers import check_timers
from jepsen.history import FAIL, INFO, INVOKE, NEMESIS_PROCESS, OK, Event, fault_windows, pair_operations

BASE = 1_700_000_000_000
QUEUE = "jt"
GROUP = "g"


class Script:
    """Builds a history from operations given as [start, end] intervals."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.processes = 0

    def op(self, f: str, value: dict, type_: str, answer: dict | None, start: int, end: int | None,
           process: int | str | None = None) -> None:
        if process is None:
            process = self.processes
            self.processes += 1
        self.events.append(Event(process, INVOKE, f, value, start * 1_000_000, BASE + start, "n1"))
        if end is not None:
            self.events.append(Event(process, type_, f, value, end * 1_000_000, BASE + end, "n1", answer))

    def schedule(self, key: str, txn: str, start: int, end: int | None, status: str | None = "scheduled",
                 deliver_at: int | None = None, type_: str = OK, message_id: str | None = None) -> None:
        answer = None
        if type_ == OK:
            answer = {"status": 200, "result": {"ok": True, "status": status, "txn": txn,
                                                "messageId": message_id or f"m-{txn}",
                                                "deliverAt": BASE + deliver_at}}
        elif type_ == FAIL:
            answer = {"status": 400, "body": {"error": "timers_bad_request"}}
        self.op("schedule", {"key": key, "txn": txn, "delayMs": 0, "op": "schedule"}, type_, answer, start, end)

    def cancel(self, key: str, start: int, end: int | None, status: str | None, txn: str | None,
               type_: str = OK) -> None:
        answer = {"status": 200, "result": {"ok": status == "cancelled", "status": status, "txn": txn}} \
            if type_ == OK else None
        self.op("cancel", {"key": key}, type_, answer, start, end)

    def peek(self, key: str, start: int, end: int, txn: str | None, final: bool = False,
             deliver_at: int | None = None) -> None:
        result = {"found": txn is not None, "txn": txn,
                  "deliverAt": BASE + deliver_at if deliver_at is not None else None}
        value = {"key": key, "final": True} if final else {"key": key}
        self.op("peek", value, OK, {"status": 200, "result": result}, start, end)

    def pop(self, start: int, end: int, messages: list[tuple[str, int]], group: str = GROUP,
            queue: str = QUEUE) -> None:
        answer = {"status": 200, "leaseId": f"lease-{start}",
                  "messages": [{"txn": txn, "offset": offset} for txn, offset in messages]}
        self.op("pop", {"queue": queue, "group": group}, OK, answer, start, end)

    def ack(self, start: int, end: int | None, items: list[tuple[str, int]], success: bool = True,
            type_: str = OK, group: str = GROUP, queue: str = QUEUE) -> None:
        answer = {"status": 200, "results": [{"index": i, "success": success} for i in range(len(items))]} \
            if type_ == OK else None
        value = {"queue": queue, "group": group, "leaseId": "l",
                 "items": [{"txn": txn, "offset": offset} for txn, offset in items]}
        self.op("ack", value, type_, answer, start, end)

    def fault(self, fault: str, start: int, end: int, **detail) -> None:
        self.events.append(Event(NEMESIS_PROCESS, INVOKE, fault, {"fault": fault, "phase": "start"},
                                 start * 1_000_000, BASE + start))
        self.events.append(Event(NEMESIS_PROCESS, INFO, fault, dict({"fault": fault, "phase": "start"}, **detail),
                                 start * 1_000_000 + 1, BASE + start))
        self.events.append(Event(NEMESIS_PROCESS, INVOKE, fault, {"fault": fault, "phase": "stop"},
                                 end * 1_000_000, BASE + end))
        self.events.append(Event(NEMESIS_PROCESS, INFO, fault, {"fault": fault, "phase": "stop"},
                                 end * 1_000_000 + 1, BASE + end))

    def ordered(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.time)

    def check_timers(self, log: list[dict]) -> dict:
        events = self.ordered()
        return check_timers(pair_operations(events), log, fault_windows(events), QUEUE)


def record(offset: int, txn: str, created: int, message_id: str | None = None) -> dict:
    return {"offset": offset, "txn": txn, "messageId": message_id or f"m-{txn}", "createdAt": BASE + created}


def failing(results: dict) -> set[str]:
    return {name for name, prop in results.items() if prop.get("valid") is not True}


def clean_script() -> tuple[Script, list[dict]]:
    """t1: scheduled, fired, popped, acked. t2: scheduled, cancelled. Final peeks find nothing."""
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.schedule("t2", "t2-1", 1000, 1012, deliver_at=4000)
    s.peek("t2", 1050, 1060, "t2-1", deliver_at=4000)
    s.cancel("t2", 1100, 1110, "cancelled", "t2-1")
    s.pop(1120, 1200, [("t1-1", 0)])
    s.ack(1210, 1220, [("t1-1", 0)])
    s.schedule("t1", "t1-2", 1300, 1310, status="scheduled", deliver_at=1400)
    s.pop(1300, 1450, [("t1-2", 1)])
    s.ack(1460, 1470, [("t1-2", 1)])
    s.peek("t1", 9000, 9010, None, final=True)
    s.peek("t2", 9000, 9011, None, final=True)
    return s, [record(0, "t1-1", 1150), record(1, "t1-2", 1420)]


def test_clean_history_passes_every_property():
    script, log = clean_script()
    results = script.check_timers(log)
    assert failing(results) == set()
    assert results["no_lost_timers"]["judged_schedules"] == 2
    assert results["no_fire_after_acknowledged_cancel"]["acknowledged_removals"] == 1
    assert results["lateness"]["fire_lag_ms"]["quiet"]["count"] == 2
    assert results["lateness"]["fire_lag_ms"]["quiet"]["max"] == 50


def test_double_fire_is_caught():
    script, log = clean_script()
    log.append(record(2, "t1-1", 1500))
    results = script.check_timers(log)
    assert results["at_most_once"]["valid"] is False
    assert results["at_most_once"]["counterexamples"][0] == {"txn": "t1-1", "offsets": [0, 2]}


def test_fire_after_acknowledged_cancel_is_caught():
    script, log = clean_script()
    log.append(record(2, "t2-1", 4010))
    results = script.check_timers(log)
    assert results["no_fire_after_acknowledged_cancel"]["valid"] is False
    assert results["no_fire_after_acknowledged_cancel"]["counterexamples"][0]["txn"] == "t2-1"
    assert results["linearizable_per_key"]["valid"] is False


def test_fire_after_cancel_that_did_not_name_its_txn_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.cancel("t1", 1100, 1110, "cancelled", None)
    results = s.check_timers([record(0, "t1-1", 3010)])
    assert results["no_fire_after_acknowledged_cancel"]["valid"] is False


def test_fire_of_a_timer_replaced_by_an_acknowledged_reschedule_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.schedule("t1", "t1-2", 1100, 1110, status="rescheduled", deliver_at=3100)
    results = s.check_timers([record(0, "t1-1", 3010), record(1, "t1-2", 3110)])
    assert results["no_fire_after_acknowledged_cancel"]["valid"] is False
    assert results["no_fire_after_acknowledged_cancel"]["counterexamples"][0]["txn"] == "t1-1"


def test_reschedule_concurrent_with_another_schedule_does_not_accuse_either():
    """Which timer the reschedule replaced is unknown when two schedules overlap it."""
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1020)
    s.schedule("t1", "t1-2", 1015, 1200, status="scheduled", deliver_at=3000)
    s.schedule("t1", "t1-3", 1100, 1110, status="rescheduled", deliver_at=3100)
    results = s.check_timers([record(0, "t1-1", 1030), record(1, "t1-3", 3110)])
    assert results["no_fire_after_acknowledged_cancel"]["valid"] is True
    assert failing(results) == set()


def test_lost_timer_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([])
    assert results["no_lost_timers"]["valid"] is False
    assert results["no_lost_timers"]["counterexamples"][0]["txn"] == "t1-1"
    assert results["linearizable_per_key"]["valid"] is False


def test_timer_still_pending_after_the_final_phase_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.cancel("t1", 1020, None, None, None, type_=INFO)  # possibly removed: not a loss by itself
    s.peek("t1", 9000, 9010, "t1-1", final=True)
    results = s.check_timers([])
    assert results["no_lost_timers"]["valid"] is False
    assert results["no_lost_timers"]["counterexamples"][0]["kind"] == "still_pending_after_final_phase"


def test_early_fire_is_caught_in_real_time_and_on_the_group_clock():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.pop(1020, 1500, [("t1-1", 0)])
    results = s.check_timers([record(0, "t1-1", 1400)])
    assert results["floor_not_before_deliverAt"]["valid"] is False
    kinds = {c["kind"] for c in results["floor_not_before_deliverAt"]["counterexamples"]}
    assert kinds == {"created_before_deliverAt", "seen_before_deliverAt"}


def test_early_fire_under_clock_skew_is_reported_not_judged():
    s = Script()
    s.fault("clock-skew", 900, 2000, offsets={"n1": 4096})
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.pop(1020, 1500, [("t1-1", 0)])
    results = s.check_timers([record(0, "t1-1", 3000)])
    floor = results["floor_not_before_deliverAt"]
    assert floor["valid"] is True
    assert floor["early_fires_under_skew"] == 1
    assert floor["largest_early_fire_under_skew"]["early_ms"] == 1500
    assert floor["early_within_forward_skew"] is True
    assert floor["max_forward_skew_ms"] == 4096


def test_duplicated_delivery_after_a_completed_ack_is_caught():
    script, log = clean_script()
    script.pop(1500, 1600, [("t1-1", 0)])
    events = script.ordered()
    consumption = check_queue_consumption(pair_operations(events), log, QUEUE)
    assert consumption["no_redelivery_after_completed_ack"]["valid"] is False


def test_redelivery_after_an_ack_that_was_only_info_is_allowed():
    s = Script()
    s.pop(1000, 1010, [("a", 0)])
    s.ack(1020, None, [("a", 0)], type_=INFO)
    s.pop(1100, 1110, [("a", 0)])
    consumption = check_queue_consumption(pair_operations(s.ordered()), [record(0, "a", 900)], QUEUE)
    assert failing(consumption) == set()


def test_pop_past_the_acked_prefix_is_caught():
    s = Script()
    s.pop(1000, 1010, [("a", 0)])
    s.ack(1020, 1030, [("a", 0)])
    s.pop(1100, 1110, [("c", 2)])
    log = [record(0, "a", 900), record(1, "b", 901), record(2, "c", 902)]
    consumption = check_queue_consumption(pair_operations(s.ordered()), log, QUEUE)
    assert consumption["pop_never_skips_unacked"]["valid"] is False


def test_non_linearizable_peek_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=5000)
    s.cancel("t1", 1100, 1110, "cancelled", "t1-1")
    s.peek("t1", 1200, 1210, "t1-1")  # a stale read: the cancel was acknowledged before it began
    results = s.check_timers([])
    assert failing(results) == {"linearizable_per_key"}
    example = results["linearizable_per_key"]["counterexamples"][0]
    assert example["key"] == "t1"
    assert example["could_not_place"]["f"] == "peek"


def test_peek_after_the_fire_was_seen_is_not_linearizable():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.pop(1020, 1200, [("t1-1", 0)])
    s.peek("t1", 1300, 1310, "t1-1", deliver_at=1100)
    results = s.check_timers([record(0, "t1-1", 1150)])
    assert results["linearizable_per_key"]["valid"] is False


def test_unexpected_message_is_caught():
    script, log = clean_script()
    log.append(record(2, "never-scheduled", 1500))
    results = script.check_timers(log)
    assert results["no_unexpected_messages"]["valid"] is False
    assert results["no_unexpected_messages"]["counterexamples"][0]["kind"] == "never_scheduled"


def test_message_from_a_definitely_failed_schedule_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, type_=FAIL)
    results = s.check_timers([record(0, "t1-1", 1100)])
    assert results["no_unexpected_messages"]["valid"] is False
    assert results["no_unexpected_messages"]["counterexamples"][0]["kind"] == "from_failed_schedule"


def test_fired_message_with_another_message_id_is_caught():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100, message_id="m-right")
    results = s.check_timers([record(0, "t1-1", 1150, message_id="m-wrong")])
    assert results["no_unexpected_messages"]["valid"] is False


def test_info_schedule_that_fired_passes():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 6000, type_=INFO)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([record(0, "t1-1", 1200)])
    assert failing(results) == set()


def test_info_schedule_that_never_fired_passes():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 6000, type_=INFO)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([])
    assert failing(results) == set()


def test_info_schedule_that_completed_late_and_replaced_a_timer_passes():
    """An info reschedule may land after later operations: t1-1 possibly replaced, so not lost."""
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.schedule("t1", "t1-2", 1100, None, type_=INFO)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([record(0, "t1-2", 3500)])
    assert failing(results) == set()


def test_gap_in_offsets_is_caught():
    script, log = clean_script()
    log[1] = record(2, "t1-2", 1420)
    results = script.check_timers(log)
    assert results["gapless_offsets"]["valid"] is False


def _push(s: Script, txn: str, start: int, end: int | None, type_: str, offset: int | None = None,
          queue: str = "jq") -> None:
    answer = {"status": 201, "result": {"status": "queued", "offset": offset}} if type_ == OK else None
    s.op("push", {"queue": queue, "txn": txn}, type_, answer, start, end)


def test_pushes_clean_and_info_pass():
    s = Script()
    _push(s, "q-0", 1000, 1010, OK, 0)
    _push(s, "q-1", 1000, 6000, INFO)
    _push(s, "q-2", 1000, 6000, INFO)
    log = [{"offset": 0, "txn": "q-0"}, {"offset": 1, "txn": "q-1"}]
    assert failing(check_pushes(pair_operations(s.ordered()), log, "jq")) == set()


def test_lost_acknowledged_push_is_caught():
    s = Script()
    _push(s, "q-0", 1000, 1010, OK, 0)
    results = check_pushes(pair_operations(s.ordered()), [], "jq")
    assert results["no_lost_acknowledged_pushes"]["valid"] is False


def test_duplicated_push_and_unexpected_push_are_caught():
    s = Script()
    _push(s, "q-0", 1000, 1010, OK, 0)
    _push(s, "q-1", 1000, 1010, FAIL)
    log = [{"offset": 0, "txn": "q-0"}, {"offset": 1, "txn": "q-0"}, {"offset": 2, "txn": "q-1"},
           {"offset": 3, "txn": "stranger"}]
    results = check_pushes(pair_operations(s.ordered()), log, "jq")
    assert results["at_most_once"]["valid"] is False
    kinds = {c["kind"] for c in results["no_unexpected_messages"]["counterexamples"]}
    assert kinds == {"from_failed_push", "never_pushed"}


def test_dedup_acknowledged_at_two_offsets_is_caught():
    s = Script()
    _push(s, "d-0", 1000, 1010, OK, 0, queue="jd")
    _push(s, "d-0", 2000, 2010, OK, 1, queue="jd")
    log = [{"offset": 0, "txn": "d-0"}, {"offset": 1, "txn": "d-0"}]
    results = check_pushes(pair_operations(s.ordered()), log, "jd", exactly_once_when_acked=True)
    assert results["push_answers_match_log"]["valid"] is False
    assert results["at_most_once"]["valid"] is False


def test_unreadable_log_is_never_a_pass():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.op("pop", {"queue": QUEUE, "group": GROUP}, OK, {"status": 200, "messages": [{"txn": "t1-1", "offset": 0}]},
         1200, 1210)
    events = s.ordered()
    results = check_timers(pair_operations(events), [record(0, "t1-1", 1150)], fault_windows(events), QUEUE,
                           log_complete=False)
    assert results["no_lost_timers"]["valid"] is None


def test_loss_is_judged_when_an_answer_proves_the_timer_already_gone():
    """t1-1 left before the peek that found nothing; the later reschedule cannot excuse its absence."""
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=1100)
    s.peek("t1", 1500, 1510, None)
    s.schedule("t1", "t1-2", 1600, 1610, status="scheduled", deliver_at=4000)
    s.schedule("t1", "t1-3", 1700, 1710, status="rescheduled", deliver_at=4100)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([record(0, "t1-3", 4110)])
    assert results["no_lost_timers"]["valid"] is False
    assert [c["txn"] for c in results["no_lost_timers"]["counterexamples"]] == ["t1-1"]


def test_a_timer_possibly_replaced_before_any_proof_is_not_called_lost():
    s = Script()
    s.schedule("t1", "t1-1", 1000, 1010, deliver_at=3000)
    s.schedule("t1", "t1-2", 1005, 1200, status="rescheduled", deliver_at=3100)
    s.peek("t1", 9000, 9010, None, final=True)
    results = s.check_timers([record(0, "t1-2", 3110)])
    assert failing(results) == set()


def test_a_partial_log_turns_absences_into_unknown_and_keeps_presences():
    from jepsen.checkers import judged_on_partial_log

    script, log = clean_script()
    partial = [log[1], dict(log[1], offset=1)]  # t1-1 missing (read stopped short), t1-2 twice
    results = judged_on_partial_log(script.check_timers(partial))
    assert results["no_lost_timers"]["valid"] is None
    assert results["linearizable_per_key"]["valid"] is None
    assert results["at_most_once"]["valid"] is False


def test_replicas_that_diverge_are_caught_and_unreadable_ones_are_unknown():
    from jepsen.checkers import check_replicas_agree

    log = [record(0, "a", 1), record(1, "b", 2)]
    same = {"n1": {"records": log, "problem": None}, "n2": {"records": list(log), "problem": None}}
    assert check_replicas_agree(same, QUEUE)["valid"] is True
    diverged = dict(same, n3={"records": [log[0], record(1, "c", 2)], "problem": None})
    result = check_replicas_agree(diverged, QUEUE)
    assert result["valid"] is False
    assert result["counterexamples"][0]["node"] == "n3" and result["counterexamples"][0]["first_difference"] == 1
    shorter = dict(same, n3={"records": log[:1], "problem": None})
    assert check_replicas_agree(shorter, QUEUE)["valid"] is False
    unreadable = dict(same, n3={"records": [], "problem": "did not answer"})
    assert check_replicas_agree(unreadable, QUEUE)["valid"] is None
