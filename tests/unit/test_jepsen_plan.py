"""Plans are reproducible from the seed; histories pair invocations with completions; the snapshot
nemeses wait for writers, down every node and start them all together."""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from jepsen import nemesis as nemesis_module
from jepsen.generator import make_plan
from jepsen.history import INFO, INVOKE, OK, Event, HistoryWriter, fault_windows, pair_operations
from jepsen.nemesis import FAULT_DURATION_S, NEMESES, SNAPSHOT_FAULTS, Nemesis, PlannedFault, plan_faults
from jepsen.run import CAMPAIGN, CAMPAIGN_BUDGET_S, CAMPAIGN_PRELOAD, RunOptions, campaign_estimate_s, command_line
from jepsen.snapshots import WriterWait
from jepsen.workloads import make_workload, run_workloads


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


# -- the snapshot nemeses --------------------------------------------------------------------------


@pytest.mark.parametrize("name", SNAPSHOT_FAULTS)
def test_a_snapshot_nemesis_plans_only_its_fault_with_a_short_down_time(name):
    planned = plan_faults(random.Random(f"1/faults/{name}"), name, 120, 3)
    assert planned and {fault.fault for fault in planned} == {name}
    low, high = FAULT_DURATION_S[name]
    assert all(low <= fault.duration_s <= high for fault in planned)


def test_mixed_draws_both_snapshot_faults_across_seeds():
    assert set(SNAPSHOT_FAULTS) <= set(NEMESES["mixed"])
    drawn = {fault.fault for seed in range(1, 6) for fault in plan_faults(random.Random(f"{seed}/faults/mixed"),
                                                                             "mixed", 120, 3)}
    assert set(SNAPSHOT_FAULTS) <= drawn


class _FakeNode:
    def __init__(self, pid: int) -> None:
        self.pid, self.paused, self.running = pid, False, True

    def alive(self) -> bool:
        return self.running


class _FakeCluster:
    """Records what the nemesis did, in order."""

    def __init__(self) -> None:
        self.nodes = {f"n{i}": _FakeNode(100 + i) for i in (1, 2, 3)}
        self.actions: list[tuple] = []

    @property
    def node_ids(self) -> list[str]:
        return list(self.nodes)

    def leader(self):
        return "n2"

    def kill(self, node):
        self.actions.append(("kill", node))
        self.nodes[node].running = False
        return True

    def stop_all(self, nodes):
        self.actions.append(("stop_all", tuple(nodes)))
        for node in nodes:
            self.nodes[node].running = False
        return {node: "exit 0" for node in nodes}

    def start(self, node):
        self.actions.append(("start", node))
        self.nodes[node].running = True


def _run_one_fault(monkeypatch, tmp_path, fault: str, wait: WriterWait) -> tuple[_FakeCluster, list]:
    asked = []

    def fake_wait(pids, min_nodes, timeout_s, stop=lambda: False, children=None):
        asked.append((dict(pids), min_nodes))
        return wait

    monkeypatch.setattr(nemesis_module, "wait_for_writers", fake_wait)
    cluster = _FakeCluster()
    history = HistoryWriter(tmp_path / "history.jsonl")
    nemesis = Nemesis(cluster, history)

    async def go():
        loop = asyncio.get_running_loop()
        await nemesis.run([PlannedFault(0.0, fault, 0.05, {})], loop.time(), asyncio.Event())

    asyncio.run(go())
    history.close()
    pids = {"n1": 101, "n2": 102, "n3": 103}
    expected = [(pids, nemesis_module.SNAPSHOT_WRITER_NODES)] + ([] if wait.found else [(pids, 1)])
    assert asked == expected
    return cluster, history.events


def test_a_snapshot_fault_without_two_writers_acts_on_one(monkeypatch, tmp_path):
    """The members take turns to write, so two writers at once are rare: after the wait for two,
    the fault acts on the first writer it meets, and its record says so."""
    asked = []

    def fake_wait(pids, min_nodes, timeout_s, stop=lambda: False, children=None):
        asked.append((min_nodes, timeout_s))
        if min_nodes == 2:
            return WriterWait(False, timeout_s, 500, {"n1": [], "n2": [], "n3": []})
        return WriterWait(True, 1.5, 75, {"n1": [], "n2": [os.getpid()], "n3": []})

    monkeypatch.setattr(nemesis_module, "wait_for_writers", fake_wait)
    cluster = _FakeCluster()
    history = HistoryWriter(tmp_path / "history.jsonl")

    async def go():
        loop = asyncio.get_running_loop()
        await Nemesis(cluster, history).run([PlannedFault(0.0, "stop-all-during-snapshot", 0.05, {})],
                                            loop.time(), asyncio.Event())

    asyncio.run(go())
    history.close()
    assert asked == [(2, nemesis_module.SNAPSHOT_PAIR_WAIT_S),
                     (1, nemesis_module.SNAPSHOT_WAIT_S - nemesis_module.SNAPSHOT_PAIR_WAIT_S)]
    start = [event.value for event in history.events if event.type == "info"][0]
    assert start["during_snapshot"] is True and start["writers"] == {"n2": [os.getpid()]}
    assert start["waited_s"] == round(nemesis_module.SNAPSHOT_PAIR_WAIT_S + 1.5, 3)


@pytest.mark.parametrize("fault, down", [("kill-all-during-snapshot", [("kill", "n1"), ("kill", "n2"), ("kill", "n3")]),
                                         ("stop-all-during-snapshot", [("stop_all", ("n1", "n2", "n3"))])])
def test_a_snapshot_fault_downs_every_node_then_starts_all_together(monkeypatch, tmp_path, fault, down):
    # os.getpid() stands for a writer that is still running after its node went down.
    wait = WriterWait(True, 0.25, 4, {"n1": [os.getpid()], "n2": [2 ** 22 + 7], "n3": []})
    cluster, events = _run_one_fault(monkeypatch, tmp_path, fault, wait)
    assert cluster.actions == down + [("start", "n1"), ("start", "n2"), ("start", "n3")]
    start, stop = [event.value for event in events if event.type == "info"]
    assert start["during_snapshot"] is True and start["writers"] == {"n1": [os.getpid()], "n2": [2 ** 22 + 7]}
    assert start["writers_outliving_nodes"] == {"n1": [os.getpid()]}
    assert set(start["ended"]) == {"n1", "n2", "n3"} and start["leader"] == "n2"
    assert stop["restarted"] == ["n1", "n2", "n3"] and stop["writers_alive_at_restart"] == {"n1": [os.getpid()]}
    windows = fault_windows(events)
    assert [w.fault for w in windows] == [fault] and windows[0].end_time is not None


def test_a_snapshot_fault_that_found_no_writer_still_acts_and_says_so(monkeypatch, tmp_path):
    cluster, events = _run_one_fault(monkeypatch, tmp_path, "kill-all-during-snapshot", WriterWait(False, 30.0, 900))
    assert [a for a in cluster.actions if a[0] == "kill"] == [("kill", "n1"), ("kill", "n2"), ("kill", "n3")]
    start = [event.value for event in events if event.type == "info"][0]
    assert start["during_snapshot"] is False and start["writers"] == {} and start["writers_outliving_nodes"] == {}


def test_a_snapshot_fault_still_waiting_when_the_run_ends_is_not_injected(monkeypatch, tmp_path):
    cluster = _FakeCluster()
    history = HistoryWriter(None)
    waited = []

    async def go():
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def fake_wait(pids, min_nodes, timeout_s, stop=lambda: False, children=None):
            waited.append(True)
            loop.call_soon_threadsafe(stop_event.set)  # the clients finish while it waits
            time.sleep(0.05)
            return WriterWait(False, 0.05, 3)

        stop_event = stop
        monkeypatch.setattr(nemesis_module, "wait_for_writers", fake_wait)
        await Nemesis(cluster, history).run([PlannedFault(0.0, "stop-all-during-snapshot", 0.05, {})],
                                            loop.time(), stop)

    asyncio.run(go())
    assert waited == [True] and cluster.actions == [] and history.events == []


def test_the_campaign_runs_both_snapshot_nemeses_and_a_mixed_run_over_a_million_timers():
    snapshot_runs = [(w, n, seed, pre) for w, n, seed, pre in CAMPAIGN if n in SNAPSHOT_FAULTS]
    assert sorted((n, seed) for _, n, seed, _ in snapshot_runs) == [
        ("kill-all-during-snapshot", 1), ("stop-all-during-snapshot", 1)]
    assert all(w == "timers" and pre >= 1_000_000 for w, _, _, pre in snapshot_runs)
    assert ("timers", "mixed", 1, CAMPAIGN_PRELOAD) in CAMPAIGN and CAMPAIGN_PRELOAD >= 1_000_000
    assert command_line(RunOptions(preload=20000)).endswith("--preload 20000")


def test_the_campaign_puts_queue_and_txn_under_every_nemesis_and_fits_its_budget_with_the_power_runs():
    nemeses = {n for w, n, _, _ in CAMPAIGN}
    for workload in ("queue", "txn"):
        assert {n for w, n, _, _ in CAMPAIGN if workload in run_workloads(w)} == nemeses
    power = [(w, "power", seed, 0) for w in ("timers", "queue", "txn") for seed in (1, 2)]
    runs = list(CAMPAIGN) + [run for run in power if run not in CAMPAIGN]
    assert campaign_estimate_s(runs) <= CAMPAIGN_BUDGET_S
