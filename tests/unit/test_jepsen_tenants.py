"""A run holds two tenants at once: the generated config, the composition of a run's workloads, their
plans, and each workload judged on its own operations."""

from __future__ import annotations

import sys
import tomllib

import pytest

import jepsen.cluster
from jepsen.cluster import ORDERS_TENANT, REPO_ROOT, TENANT, TENANT_TOKENS, Cluster
from jepsen.nodes import PORT_RANGE, free_port_block, free_ports
from jepsen.generator import make_plan
from jepsen.history import INVOKE, OK, Event, pair_operations, workload_operations
from jepsen.report import find_property, operation_table, render_campaign, summarize
from jepsen.run import RunOptions, command_line, run_name
from jepsen.workloads import COMPANIONS, WORKLOAD_NAMES, make_workload, run_workloads


def test_the_config_holds_both_tenants_and_one_proxy_per_tenant_on_each_link(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        config = tomllib.loads(cluster.config_path.read_text(encoding="utf-8"))
        assert [t["name"] for t in config["tenants"]] == [TENANT, ORDERS_TENANT]
        tokens = {t["name"]: {token["token"] for token in t["tokens"]} for t in config["tenants"]}
        assert tokens == {name: set(pair) for name, pair in TENANT_TOKENS.items()}
        proxies = cluster.network._proxies
        assert len(proxies) == 3 * 2 * 2  # 6 directed links, 2 tenants each
        for node in config["nodes"]:
            for peer_address, proxy_address in node["dial"].items():
                peer = next(n for n in cluster.nodes.values() if n.raft_address == peer_address)
                proxy_port = int(proxy_address.rsplit(":", 1)[1])
                for offset in range(2):  # tenant i dials proxy port + i to reach raft port + i
                    proxy = proxies[(node["id"], peer.id, peer.raft_port + offset)]
                    assert proxy.listen_port == proxy_port + offset
        ports = [n.http_port for n in cluster.nodes.values()] + [p + i for n in cluster.nodes.values()
                                                                  for p in [n.raft_port] for i in range(2)]
        ports += [proxy.listen_port for proxy in proxies.values()]
        assert len(ports) == len(set(ports))
    finally:
        cluster.close()


def test_the_nodes_run_the_code_of_the_harness_s_own_tree(tmp_path, monkeypatch):
    # Another checkout first on the path (as an editable install of another tree would be) must not
    # be what the nodes run: the harness judges the tree it belongs to.
    other = tmp_path / "other-checkout"
    (other / "queen_raft").mkdir(parents=True)
    (other / "queen_raft" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(other))
    monkeypatch.setattr(jepsen.cluster, "node_command", lambda: [
        sys.executable, "-c", "import queen_raft; print('imported', queen_raft.__file__)"])
    cluster = Cluster(tmp_path / "run")
    try:
        node = cluster.start("n1")
        assert node.process.wait(timeout=30) == 0
        imported = [line for line in node.log_path.read_text(encoding="utf-8").splitlines()
                    if line.startswith("imported ")]
        assert imported == [f"imported {REPO_ROOT / 'queen_raft' / '__init__.py'}"]
    finally:
        cluster.close()


def test_every_run_holds_both_tenants():
    for name in WORKLOAD_NAMES:
        tenants = {make_workload(n).tenant for n in run_workloads(name)}
        assert tenants == {TENANT, ORDERS_TENANT}, name
    assert run_workloads("timers") == ["timers", "queue", "txn"]
    assert run_workloads("txn") == ["txn", "timers"]
    assert run_workloads("queue", []) == ["queue"]
    with pytest.raises(ValueError):
        run_workloads("timers", ["timers"])
    with pytest.raises(ValueError):
        run_workloads("timers", ["nope"])
    assert set(COMPANIONS) == set(WORKLOAD_NAMES)


def test_a_workload_plans_the_same_operations_beside_others_as_alone():
    names = run_workloads("timers")
    together = make_plan([make_workload(n) for n in names], "mixed", 3, 20, 20, 3)
    assert together.workloads == names
    assert [op.at_s for op in together.ops] == sorted(op.at_s for op in together.ops)
    for name in names:
        alone = make_plan(make_workload(name), "mixed", 3, 20, 20, 3)
        assert [(op.at_s, op.f, op.value) for op in together.ops_of(name)] == \
               [(op.at_s, op.f, op.value) for op in alone.ops]
    assert together.to_json()["companions"] == ["queue", "txn"]


def test_the_timers_plan_sends_some_schedules_and_cancels_through_a_transaction():
    ops = make_plan(make_workload("timers"), "none", 1, 60, 20, 3).ops
    through = [op for op in ops if op.value.get("via") == "txn"]
    assert {op.f for op in through} == {"schedule", "cancel"}
    assert 0.15 < len(through) / sum(1 for op in ops if op.f != "peek") < 0.45


def test_each_workload_pairs_and_judges_its_own_operations():
    events = [
        Event("final", INVOKE, "peek", {"key": "t1"}, 10, 1, workload="timers"),
        Event("final", INVOKE, "push", {"queue": "jq", "txn": "q-1"}, 11, 1, workload="queue"),
        Event("final", OK, "push", {"queue": "jq", "txn": "q-1"}, 12, 2, workload="queue"),
        Event("final", OK, "peek", {"key": "t1"}, 13, 2, workload="timers"),
    ]
    operations = pair_operations(events)
    assert [(op.workload, op.f, op.complete_time) for op in operations] == [("timers", "peek", 13),
                                                                           ("queue", "push", 12)]
    assert [op.f for op in workload_operations(operations, "queue")] == ["push"]
    again = pair_operations([Event.from_json(e.to_json()) for e in events])
    assert [op.workload for op in again] == ["timers", "queue"]


def test_a_run_is_named_for_all_its_workloads_and_says_how_to_repeat_it():
    options = RunOptions("txn", "kill", 2)
    assert run_name(options).endswith("-txn+timers-kill-s2")
    assert "--with" not in command_line(options)
    assert command_line(RunOptions("queue", companions=[])).endswith("--with none")


def test_the_campaign_table_has_a_line_per_workload_of_each_run():
    properties = {"timers/at_most_once": {"valid": True}, "timers/lateness": {"valid": True, "judged": False,
                                                                              "fire_lag_ms": {"quiet": {"p50": 5}}},
                  "queue/at_most_once": {"valid": False}, "txn/replicas_agree": {"valid": None}}
    plan = {"workload": "timers", "companions": ["queue", "txn"], "nemesis": "kill", "seed": 1,
            "duration_s": 60, "rate": 20}
    summary = summarize("r", plan, "cmd", properties, [], [], [],
                        {"timers": TENANT, "queue": ORDERS_TENANT, "txn": ORDERS_TENANT})
    assert summary["workloads"]["queue"] == {"tenant": ORDERS_TENANT, "valid": False, "operation_count": 0}
    assert find_property(properties, "lateness")["judged"] is False
    table = render_campaign([summary]).splitlines()
    rows = [line for line in table if line.startswith("| r |")]
    assert len(rows) == 3
    assert "| timers (jepsen) |" in rows[0] and "| pass | 1/1 | - | 5/-/- |" in rows[0]
    assert "| FAIL | 0/1 | at_most_once FAIL |" in rows[1]
    assert "| unknown | 0/1 | replicas_agree unknown |" in rows[2]


def test_a_run_that_judged_nothing_is_unknown_in_the_campaign_table_not_a_pass():
    # A cluster that never came up leaves no property: its lines must not read as passes.
    plan = {"workload": "timers", "companions": ["queue", "txn"], "nemesis": "partition", "seed": 2,
            "duration_s": 60, "rate": 20}
    summary = summarize("r", plan, "cmd", {}, [], [], ["the cluster did not become healthy"],
                        {"timers": TENANT, "queue": ORDERS_TENANT, "txn": ORDERS_TENANT})
    assert summary["valid"] is None and summary["workloads"]["timers"]["valid"] is None
    rows = [line for line in render_campaign([summary]).splitlines() if line.startswith("| r |")]
    assert len(rows) == 3 and all("| unknown | 0/0 |" in row for row in rows), rows


def test_the_operation_counts_are_by_workload_and_name_the_transaction_route():
    events = [
        Event(1, INVOKE, "cancel", {"key": "t1", "via": "txn-ack"}, 10, 1, workload="timers"),
        Event(1, OK, "cancel", {"key": "t1", "via": "txn-ack"}, 11, 2, workload="timers"),
        Event(2, INVOKE, "push", {"queue": "jq", "txn": "q-1"}, 12, 3, workload="queue"),
        Event(2, OK, "push", {"queue": "jq", "txn": "q-1"}, 13, 4, workload="queue"),
    ]
    table = operation_table(pair_operations(events))
    assert table == {"queue/push": {"ok": 1, "fail": 0, "info": 0},
                     "timers/cancel via txn-ack": {"ok": 1, "fail": 0, "info": 0}}


def ephemeral_range() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as file:
        low, high = map(int, file.read().split())
    return low, high


def test_the_harness_picks_ports_outside_the_kernels_ephemeral_range():
    """A node's port picked by bind(0) came from the ephemeral range: while the node was down an
    outgoing connection took it as its local port, and the restarted node could not bind it for
    27 s (a power run judged that the node's failure to start)."""
    low, high = ephemeral_range()
    ports = free_ports(40)
    assert len(set(ports)) == 40
    assert all(PORT_RANGE[0] <= port < PORT_RANGE[1] and not low <= port <= high for port in ports)
    base = free_port_block(3, taken=frozenset(ports))
    assert not set(range(base, base + 3)) & set(ports)
    assert all(not low <= port <= high for port in range(base, base + 3))
