"""The txn workload's checkers on synthetic histories: each broken history caught, the clean one passing.

The clean history (times in ms, on both clocks):
- x0 ok:   fire on c0 expecting absent (version 0 -> 1)
- x1 ok:   hold on c0 expecting 1 (-> 2); released by x2, so its timer is gone at the end
- x2 ok:   release of x1 on c1 expecting absent (-> 1)
- x3 fail: stale (read 2, expected 1), refused with kv_precondition
- x4 info: fire on c2 that did not apply
- x5 info, retried, the retry refused as a duplicate: hold on c1 expecting 1 (-> 2) that applied
"""

from __future__ import annotations

import copy

from jepsen.checkers import judged_on_partial_log
from jepsen.client import Outcome
from jepsen.history import FAIL, INFO, INVOKE, OK, Event, pair_operations
from jepsen.transaction_checkers import LOG_A, LOG_B, LOG_FIRES, check_transactions
from jepsen.workloads.transactions import COUNTERS, TransactionsWorkload, normalize_transaction, transaction_body

BASE = 1_700_000_000_000


class History:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.process = 0

    def txn(self, txn: str, counter: str, expected: int | None, kind: str, type_: str, start: int, end: int,
            stale: bool = False, target: str | None = None, version: int | None = None,
            reason: str | None = None, deliver_at: int | None = None) -> None:
        value = {"txn": txn, "counter": counter, "readVersion": expected, "stale": stale,
                 "expectedVersion": expected,
                 "timer": {"kind": kind, "delayMs": None if kind == "release" else 100, "target": target}}
        answer = None
        if type_ == OK:
            after = version if version is not None else (expected or 0) + 1
            answer = {"status": 200,
                      "pushes": [{"partition": p, "transactionId": f"{txn}-{p[1]}", "status": "queued", "offset": None}
                                 for p in ("pa", "pb")],
                      "kv": [{"key": counter, "found": expected is not None, "version": expected},
                             {"key": counter, "found": True, "version": after},
                             {"key": f"op-{txn}", "found": True, "version": 1}],
                      "timer": {"status": "scheduled", "txn": f"{txn}-t", "deliverAt": deliver_at}}
        elif type_ == FAIL:
            answer = {"status": 200, "reason": reason or "kv_precondition", "index": 2}
        self.events.append(Event(self.process, INVOKE, "txn", value, start * 1_000_000, BASE + start, "n1"))
        self.events.append(Event(self.process, type_, "txn", value, end * 1_000_000, BASE + end, "n1", answer))
        self.process += 1

    def operations(self):
        return pair_operations(sorted(self.events, key=lambda e: e.time))


def clean() -> tuple[History, dict]:
    h = History()
    h.txn("x0", "c0", None, "fire", OK, 1000, 1010)
    h.txn("x1", "c0", 1, "hold", OK, 1020, 1030)
    h.txn("x2", "c1", None, "release", OK, 1040, 1050, target="x1")
    h.txn("x3", "c0", 1, "fire", FAIL, 1060, 1070, stale=True)
    h.txn("x4", "c2", None, "fire", INFO, 1080, 9000)
    h.txn("x5", "c1", 1, "hold", INFO, 1100, 9000)
    h.txn("x5", "c1", 1, "hold", FAIL, 9010, 9020, reason="duplicate")

    def log(*txns: str) -> list[dict]:
        return [{"offset": i, "txn": t, "messageId": f"m-{t}"} for i, t in enumerate(txns)]

    state = {
        "logs": {LOG_A: log("x0-a", "x1-a", "x2-a", "x5-a"), LOG_B: log("x0-b", "x1-b", "x2-b", "x5-b"),
                 LOG_FIRES: log("x0-t")},
        "kv": {"c0": {"found": True, "version": 2, "value": {"n": 2}},
               "c1": {"found": True, "version": 2, "value": {"n": 2}},
               "c2": {"found": False, "version": None, "value": None},
               "op-x0": {"found": True, "value": {"counter": "c0", "prev": 0}},
               "op-x1": {"found": True, "value": {"counter": "c0", "prev": 1}},
               "op-x2": {"found": True, "value": {"counter": "c1", "prev": 0}},
               "op-x3": {"found": False}, "op-x4": {"found": False},
               "op-x5": {"found": True, "value": {"counter": "c1", "prev": 1}}},
        "timers": {"x5": {"txn": "x5-t"}},
    }
    return h, state


def check(h: History, state: dict, replica_logs: dict | None = None) -> dict:
    replicas = replica_logs if replica_logs is not None else {
        name: {node: {"records": records, "problem": None} for node in ("n1", "n2", "n3")}
        for name, records in state["logs"].items()}
    return check_transactions(h.operations(), state["logs"], replicas, state["kv"], state["timers"], COUNTERS,
                              {name: True for name in (LOG_A, LOG_B, LOG_FIRES)})


def failing(results: dict) -> set[str]:
    return {name for name, prop in results.items() if prop.get("valid") is not True}


def test_clean_history_passes_every_property():
    results = check(*clean())
    assert failing(results) == set(), {n: results[n]["counterexamples"] for n in failing(results)}
    assert results["transaction_atomicity"]["transactions"] == {"fail/none": 1, "info/all": 1, "info/none": 1,
                                                                "ok/all": 3}
    assert results["kv_counter_serializable"]["refusal_reasons"] == {"duplicate": 1, "kv_precondition": 1}


def test_ok_transaction_missing_one_push_is_caught():
    h, state = clean()
    state["logs"][LOG_B] = [dict(r, offset=i) for i, r in enumerate(r for r in state["logs"][LOG_B] if r["txn"] != "x0-b")]
    results = check(h, state)
    assert results["transaction_atomicity"]["valid"] is False
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x0"]
    assert results["no_lost_acknowledged_pushes"]["valid"] is False


def test_refused_transaction_with_a_visible_kv_write_is_caught():
    h, state = clean()
    state["kv"]["op-x3"] = {"found": True, "value": {"counter": "c0", "prev": 1}}
    results = check(h, state)
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x3"]
    kinds = {c["kind"] for c in results["kv_counter_serializable"]["counterexamples"]}
    assert "two_applied_transactions_expected_one_version" in kinds


def test_info_transaction_half_applied_is_caught():
    h, state = clean()
    state["logs"][LOG_A].append({"offset": 4, "txn": "x4-a", "messageId": "m"})
    results = check(h, state)
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x4"]
    assert results["transaction_atomicity"]["counterexamples"][0]["outcome"] == INFO


def test_info_transaction_whose_timer_fired_alone_is_caught():
    h, state = clean()
    state["logs"][LOG_FIRES].append({"offset": 1, "txn": "x4-t", "messageId": "m"})
    results = check(h, state)
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x4"]


def test_applied_release_whose_target_is_still_pending_is_caught():
    h, state = clean()
    state["timers"]["x1"] = {"txn": "x1-t"}
    results = check(h, state)
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x2"]


def test_a_release_refused_because_its_hold_was_not_pending_is_caught():
    h, state = clean()
    h.txn("x6", "c2", None, "release", FAIL, 1200, 1210, target="x1", reason="timer_not_pending")
    state["kv"]["op-x6"] = {"found": False}
    results = check(h, state)
    # Its target is gone (x2 released it) while it failed: atomicity flags the same release.
    assert failing(results) == {"release_found_hold_pending", "transaction_atomicity"}
    assert [c["txn"] for c in results["release_found_hold_pending"]["counterexamples"]] == ["x6"]


def test_acknowledged_hold_whose_timer_vanished_is_caught():
    h, state = clean()
    del state["timers"]["x5"]
    results = check(h, state)
    assert [c["txn"] for c in results["transaction_atomicity"]["counterexamples"]] == ["x5"]


def test_lost_update_two_writers_of_one_version_is_caught():
    h, state = clean()
    state["kv"]["op-x5"]["value"]["prev"] = 0  # x2 and x5 both passed a check of version 0 on c1
    state["kv"]["c1"] = {"found": True, "version": 1, "value": {"n": 1}}
    results = check(h, state)
    kinds = {c["kind"] for c in results["kv_counter_serializable"]["counterexamples"]}
    assert "two_applied_transactions_expected_one_version" in kinds
    assert "applied_transactions_do_not_account_for_the_counter" in kinds


def test_counter_write_without_its_op_key_is_caught():
    h, state = clean()
    state["kv"]["c0"] = {"found": True, "version": 3, "value": {"n": 3}}
    results = check(h, state)
    problem = results["kv_counter_serializable"]["counterexamples"][0]
    assert problem["kind"] == "applied_transactions_do_not_account_for_the_counter"
    assert problem["missing_prev_versions"] == [2]


def test_counter_value_that_disagrees_with_its_version_is_caught():
    h, state = clean()
    state["kv"]["c0"]["value"] = {"n": 1}
    results = check(h, state)
    assert results["kv_counter_serializable"]["counterexamples"][0]["kind"] == "counter_value_differs_from_its_version"


def test_stale_check_that_was_accepted_is_caught():
    h = History()
    h.txn("x0", "c0", None, "fire", OK, 1000, 1010)
    h.txn("x1", "c0", None, "fire", OK, 1020, 1030, stale=True, version=2)
    _, state = clean()
    results = check(h, state)
    kinds = [c["kind"] for c in results["kv_counter_serializable"]["counterexamples"]]
    assert "stale_precondition_accepted" in kinds
    assert "answered_version_is_not_expected_plus_one" in kinds


def test_versions_going_backwards_in_real_time_are_caught():
    h = History()
    h.txn("x0", "c0", 4, "fire", OK, 1000, 1010)  # answered 5
    h.txn("x1", "c0", 2, "fire", OK, 1020, 1030)  # began after x0 answered, answered 3
    _, state = clean()
    kinds = [c["kind"] for c in check(h, state)["kv_counter_serializable"]["counterexamples"]]
    assert "version_not_increasing_in_real_time" in kinds


def test_duplicated_push_and_gap_are_caught():
    h, state = clean()
    state["logs"][LOG_A].append({"offset": 5, "txn": "x0-a", "messageId": "m"})
    results = check(h, state)
    assert results["at_most_once"]["valid"] is False
    assert results["at_most_once"]["counterexamples"][0]["log"] == LOG_A
    assert results["gapless_offsets"]["valid"] is False


def test_double_fire_is_caught():
    h, state = clean()
    state["logs"][LOG_FIRES].append({"offset": 1, "txn": "x0-t", "messageId": "m"})
    assert check(h, state)["at_most_once"]["valid"] is False


def test_diverged_replica_is_caught():
    h, state = clean()
    replicas = {name: {node: {"records": records, "problem": None} for node in ("n1", "n2")}
                for name, records in state["logs"].items()}
    replicas[LOG_B]["n3"] = {"records": state["logs"][LOG_B][:2], "problem": None}
    assert check(h, state, replicas)["replicas_agree"]["valid"] is False


def test_a_partial_read_turns_absences_into_unknown():
    h, state = clean()
    broken = copy.deepcopy(state)
    broken["logs"][LOG_B] = broken["logs"][LOG_B][:1]
    results = judged_on_partial_log(check(h, broken))
    assert results["transaction_atomicity"]["valid"] is None
    assert results["kv_counter_serializable"]["valid"] is None


def test_a_refusal_is_a_fail_with_its_reason_and_a_commit_is_ok():
    refused = normalize_transaction(Outcome(OK, 200, {"success": False, "reason": "kv_precondition", "index": 2,
                                                      "error": "version"}))
    assert refused[0] == FAIL and refused[1]["reason"] == "kv_precondition"
    results = [{"partition": "pa", "transactionId": "x0-a", "status": "queued", "offset": 0},
               {"partition": "pb", "transactionId": "x0-b", "status": "queued", "offset": 0},
               {"key": "c0", "found": False, "version": None}, {"key": "c0", "found": True, "version": 1},
               {"key": "op-x0", "found": True, "version": 1},
               {"status": "scheduled", "txn": "x0-t", "deliverAt": 5, "timerKey": "x0"}]
    type_, answer = normalize_transaction(Outcome(OK, 200, {"success": True, "results": results}))
    assert type_ == OK and answer["kv"][1]["version"] == 1 and answer["timer"]["deliverAt"] == 5
    assert normalize_transaction(Outcome(OK, 200, {"success": True, "results": results[:5]}))[0] == INFO


def test_plan_is_seeded_and_the_body_matches_what_the_checker_reads():
    import random

    workload = TransactionsWorkload()
    first = workload.plan(random.Random("1/ops/txn"), 10, 20)
    assert first == workload.plan(random.Random("1/ops/txn"), 10, 20)
    assert {op.value["timer"] for op in first} == {"fire", "hold", "release"}
    value = {"txn": "x7", "counter": "c1", "expectedVersion": 3, "stale": False,
             "timer": {"kind": "release", "delayMs": None, "target": "x2"}}
    body = transaction_body(value)
    [push] = body["operations"]  # an odd-numbered one: the Queen 2.x shape
    assert push["type"] == "push" and [item["transactionId"] for item in push["items"]] == ["x7-a", "x7-b"]
    assert [op["transactionId"] for op in transaction_body({**value, "txn": "x8"})["operations"]] == ["x8-a", "x8-b"]
    assert body["kv"][0] == {"op": "check", "ns": "jx-bank", "key": "c1", "expectedVersion": 3}
    assert body["kv"][1]["value"]["n"] == 4 and body["kv"][2]["value"] == {"counter": "c1", "prev": 3}
    assert body["timers"] == [{"op": "cancel", "queue": "jxt", "timerKey": "x2", "requirePending": True}]


class _ReadClient:
    """Answers the counter read with `version` (None: the read did not answer)."""

    node_ids = ["n1", "n2", "n3"]

    def __init__(self, version: int | None, type_: str = OK) -> None:
        self.version, self.type = version, type_

    async def call(self, process, node, f, value, method, path, body=None, normalize=None, timeout_s=None):
        assert node == "n2", "the read goes to the node after the transaction's"
        if self.type != OK:
            return self.type, {"status": None, "body": {"error": "timeout"}}
        return OK, {"status": 200, "result": {"found": self.version is not None, "version": self.version}}


def _prepare(workload: TransactionsWorkload, client: _ReadClient, stale: bool, timer: str = "fire") -> dict:
    import asyncio

    planned = {"txn": "x1", "counter": "c0", "stale": stale, "timer": timer, "delayMs": 5}
    return asyncio.run(workload._prepare(client, 0, "n1", planned))


def test_a_stale_transaction_expects_a_version_that_can_no_longer_match():
    workload = TransactionsWorkload()
    assert _prepare(workload, _ReadClient(3), stale=True)["expectedVersion"] == 2
    at_one = _prepare(workload, _ReadClient(1), stale=True)
    assert at_one["stale"] and at_one["expectedVersion"] is None  # asserts absence of a key that exists
    fresh = _prepare(workload, _ReadClient(None), stale=True)  # nothing older than absence: not stale
    assert not fresh["stale"] and fresh["expectedVersion"] is None
    assert _prepare(workload, _ReadClient(3), stale=False)["expectedVersion"] == 3


def test_an_unanswered_read_guesses_the_known_version_and_is_never_called_stale():
    workload = TransactionsWorkload()
    workload.known_versions["c0"] = 7
    value = _prepare(workload, _ReadClient(None, INFO), stale=True)
    assert value == dict(value, stale=False, expectedVersion=7, readVersion=None)


def test_a_release_targets_the_oldest_acknowledged_hold_once_and_falls_back_to_a_fire():
    workload = TransactionsWorkload()
    workload.releasable.extend(["x0", "x3"])
    assert _prepare(workload, _ReadClient(1), stale=False, timer="release")["timer"]["target"] == "x0"
    assert _prepare(workload, _ReadClient(1), stale=False, timer="release")["timer"]["target"] == "x3"
    assert _prepare(workload, _ReadClient(1), stale=False, timer="release")["timer"] == {
        "kind": "fire", "delayMs": 5, "target": None}


def test_the_final_wait_covers_acknowledged_and_unknown_fires_but_not_holds():
    h = History()
    h.txn("x0", "c0", None, "fire", OK, 1000, 1010, deliver_at=BASE + 30_000)
    h.txn("x1", "c0", 1, "fire", INFO, 1020, 2000)  # delay 100 ms after its last possible stamp
    h.txn("x2", "c0", 2, "hold", OK, 1040, 1050, deliver_at=BASE + 3_600_000)
    deadline = TransactionsWorkload().pending_deadline_wall_ms(h.operations(), max_forward_skew_ms=50_000)
    assert deadline == BASE + 2000 + 50_000 + 100 + 5000
