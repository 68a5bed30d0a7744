"""Plans are reproducible from the seed; histories pair invocations with completions."""

from __future__ import annotations

from jepsen.generator import make_plan
from jepsen.history import INFO, INVOKE, OK, Event, pair_operations
from jepsen.workloads import make_workload


def test_same_seed_same_plan_and_nemesis_does_not_change_client_ops():
    workload = make_workload("timers")
    first = make_plan(workload, "mixed", 7, 30, 20, 3).to_json()
    again = make_plan(workload, "mixed", 7, 30, 20, 3).to_json()
    other_nemesis = make_plan(workload, "kill", 7, 30, 20, 3).to_json()
    other_seed = make_plan(workload, "mixed", 8, 30, 20, 3).to_json()
    assert first == again
    assert first["ops"] == other_nemesis["ops"]
    assert first["ops"] != other_seed["ops"]
    assert first["faults"] and all(f["at_s"] + f["duration_s"] < 30 for f in first["faults"])


def test_timer_txns_are_unique_and_name_their_key():
    plan = make_plan(make_workload("timers"), "none", 3, 30, 20, 3)
    txns = [op.value["txn"] for op in plan.ops if op.f == "schedule"]
    assert len(txns) == len(set(txns))
    assert all(txn.startswith(op.value["key"] + "-") for op in plan.ops if op.f == "schedule"
               for txn in [op.value["txn"]])


def test_pairing_and_an_unfinished_invocation_becomes_open_info():
    events = [
        Event(1, INVOKE, "peek", {"key": "t1"}, 10, 1),
        Event(2, INVOKE, "peek", {"key": "t2"}, 11, 1),
        Event(1, OK, "peek", {"key": "t1"}, 12, 2, answer={"result": {"found": False}}),
    ]
    operations = pair_operations(events)
    assert [(op.process, op.type, op.complete_time) for op in operations] == [(1, OK, 12), (2, INFO, None)]
