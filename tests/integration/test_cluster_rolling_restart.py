"""`queen-raft cluster restart-all` under a steady load: nothing acknowledged is lost, and no group
is without a leader for more than 2 s. Real node processes, started with `cluster start`."""

from __future__ import annotations

import itertools
import re
import threading
import time

import pytest

from cluster_cli_fixture import cli, health, node_cli, pid_of, stop_every_node, wait_all_healthy, wait_for, written_config
from cluster_fixture import TENANTS, http_call, token

pytestmark = pytest.mark.integration

LEADERLESS_BOUND_S = 2.0  # the bound for any group during a rolling restart
# Each writer call's own bound: a node being stopped may hold a request until it closes.
WRITE_TIMEOUT_S = 3.0
# The load stops by itself after this, whatever happens to restart-all.
WRITER_MAX_S = 90.0
MONITOR_INTERVAL_S = 0.05
RESTART_ALL_TIMEOUT_S = 180
QUEUE = "rolling"
LIST_PAGE = 1000


class SteadyWriter(threading.Thread):
    """Schedules timers one at a time, alternating tenants, through the nodes in turn; a call that
    fails is retried (the same timerKey and txn: an upsert) on the next node. Records what was
    acknowledged, and when."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.acked: dict[str, list[tuple[str, float]]] = {t: [] for t in TENANTS}
        self.failed_calls = 0

    def run(self) -> None:
        nodes = itertools.cycle(self.cluster.node_ids)
        deadline = time.monotonic() + WRITER_MAX_S
        for i in itertools.count():
            tenant = TENANTS[i % len(TENANTS)]
            key = f"w-{i}"
            body = {"operations": [{"op": "schedule", "queue": QUEUE, "timerKey": key, "delayMs": 3_600_000,
                                    "txn": key, "payload": "eyJoaSI6MX0="}]}
            while True:
                if self.stop_event.is_set() or time.monotonic() > deadline:
                    return
                status, _, answer = http_call(f"{self.cluster.url(next(nodes))}/api/v1/timers", "POST",
                                              token(tenant, "read-write"), body, timeout=WRITE_TIMEOUT_S)
                if status == 200 and answer["results"][0]["ok"]:
                    self.acked[tenant].append((key, time.monotonic()))
                    break
                self.failed_calls += 1
                time.sleep(0.02)


class LeaderWatch(threading.Thread):
    """Every MONITOR_INTERVAL_S, whether some node answers as each group's leader; the longest time
    each group went without one (a stopped leader counts as none from the moment it stops answering),
    and the most nodes seen not answering /health at once (one at a time is the point of a rolling
    restart: two down of three is no majority)."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.longest_gap = {t: 0.0 for t in TENANTS}
        self.most_down: set[str] = set()

    def run(self) -> None:
        last_led = {t: time.monotonic() for t in TENANTS}
        while not self.stop_event.is_set():
            led, down = set(), set()
            for node_id in self.cluster.node_ids:
                _, body = health(self.cluster, node_id, timeout=0.5)
                if body and body.get("node") == node_id:
                    led |= {t for t, g in body["groups"].items() if g.get("role") == "leader"}
                else:
                    down.add(node_id)
            if len(down) > len(self.most_down):
                self.most_down = down
            now = time.monotonic()
            for tenant in TENANTS:
                if tenant in led:
                    last_led[tenant] = now
                self.longest_gap[tenant] = max(self.longest_gap[tenant], now - last_led[tenant])
            time.sleep(MONITOR_INTERVAL_S)


def pending_keys(cluster, node_id: str, tenant: str) -> set[str]:
    keys: set[str] = set()
    after = ""
    while True:
        status, _, page = http_call(f"{cluster.url(node_id)}/api/v1/timers/{QUEUE}?limit={LIST_PAGE}&after={after}",
                                    token_text=token(tenant, "read-only"))
        assert status == 200, page
        keys |= {row["timerKey"] for row in page["rows"]}
        if not page["truncated"]:
            return keys
        after = page["nextAfter"]


def test_restart_all_under_steady_load_loses_nothing_and_keeps_every_group_led(tmp_path):
    cluster = written_config(tmp_path)
    writer, watch = SteadyWriter(cluster), LeaderWatch(cluster)
    try:
        for node_id in cluster.node_ids:
            started = node_cli(cluster, "start", node_id)
            assert started.returncode == 0, started.stderr
        wait_all_healthy(cluster)
        pids_before = {n: pid_of(cluster, n) for n in cluster.node_ids}
        watch.start()
        writer.start()
        time.sleep(1.0)  # the load runs before the first stop
        began = time.monotonic()
        done = cli("cluster", "restart-all", "--config", str(cluster.config_path), timeout=RESTART_ALL_TIMEOUT_S)
        ended = time.monotonic()
        time.sleep(1.0)  # and after the last start
        writer.stop_event.set()
        watch.stop_event.set()
        writer.join(WRITE_TIMEOUT_S * 3)
        watch.join(5)
        assert done.returncode == 0, (done.stdout, done.stderr)

        steps = re.findall(r"^(n\d): stopped \(pid (\d+)\) .* healthy and caught up ([\d.]+) s after the stop",
                           done.stdout, re.M)
        assert sorted(s[0] for s in steps) == cluster.node_ids, done.stdout
        assert all(int(pid) == pids_before[n] for n, pid, _ in steps)
        pids_after = {n: pid_of(cluster, n) for n in cluster.node_ids}
        assert all(pids_after[n] not in (None, pids_before[n]) for n in cluster.node_ids), (pids_before, pids_after)

        during = sum(1 for t in TENANTS for _, at in writer.acked[t] if began <= at <= ended)
        assert during >= 20, f"only {during} writes acknowledged during the restart: not a steady load"
        for tenant in TENANTS:
            acked = {key for key, _ in writer.acked[tenant]}
            for node_id in cluster.node_ids:
                missing = acked - pending_keys(cluster, node_id, tenant)
                assert not missing, f"{tenant}: {len(missing)} acknowledged timers missing on {node_id}: {sorted(missing)[:5]}"
        assert len(watch.most_down) <= 1, f"nodes {sorted(watch.most_down)} were down at the same time"
        assert all(gap <= LEADERLESS_BOUND_S for gap in watch.longest_gap.values()), watch.longest_gap
        print(f"\nrestart-all {ended - began:.1f} s; per node {[float(s[2]) for s in steps]} s after the stop; "
              f"acknowledged {sum(len(a) for a in writer.acked.values())} ({during} during), "
              f"failed calls retried {writer.failed_calls}; longest leaderless gap per group "
              f"{ {t: round(g, 2) for t, g in watch.longest_gap.items()} } s")
    finally:
        writer.stop_event.set()
        watch.stop_event.set()
        stop_every_node(cluster)


def test_restart_all_refuses_to_begin_with_a_node_down(tmp_path):
    cluster = written_config(tmp_path, node_count=2)
    try:
        assert node_cli(cluster, "start", "n1").returncode == 0
        first = pid_of(cluster, "n1")
        done = cli("cluster", "restart-all", "--config", str(cluster.config_path))
        assert done.returncode == 1
        assert "node n2 has no running process" in done.stderr
        assert pid_of(cluster, "n1") == first  # nothing restarted
    finally:
        stop_every_node(cluster)


def without_tenant(config_text: str, tenant: str) -> str:
    """The config with one [[tenants]] entry (and its tokens) left out."""
    entry = rf'\[\[tenants\]\]\nname = "{tenant}"\n.*?(?=\[\[tenants\]\]\n|\[settings\])'
    return re.sub(entry, "", config_text, count=1, flags=re.S)


def test_restart_all_rolls_in_a_tenant_appended_to_the_config(tmp_path):
    cluster = written_config(tmp_path)
    full = cluster.config_path.read_text()
    added = TENANTS[-1]
    cluster.config_path.write_text(without_tenant(full, added))
    assert f'name = "{added}"' not in cluster.config_path.read_text() and "raft_password" in cluster.config_path.read_text()
    try:
        for node_id in cluster.node_ids:
            assert node_cli(cluster, "start", node_id).returncode == 0
        wait_for(lambda: all(health(cluster, n)[0] == 200 for n in cluster.node_ids), 30, "the one-tenant cluster")
        cluster.config_path.write_text(full)  # the tenant appended at the end, as docs/operations.md says
        done = cli("cluster", "restart-all", "--config", str(cluster.config_path), timeout=RESTART_ALL_TIMEOUT_S)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert f"new tenant(s) {added}" in done.stdout
        wait_all_healthy(cluster)
        status, _, answer = http_call(f"{cluster.url('n1')}/api/v1/timers", "POST", token(added, "read-write"), {
            "operations": [{"op": "schedule", "queue": QUEUE, "timerKey": "first", "txn": "first", "delayMs": 60_000,
                            "payload": "eyJoaSI6MX0="}]})
        assert status == 200 and answer["results"][0]["ok"], answer
    finally:
        stop_every_node(cluster)


def test_restart_all_refuses_a_tenant_inserted_before_the_running_ones(tmp_path):
    cluster = written_config(tmp_path)
    full = cluster.config_path.read_text()
    first = TENANTS[0]
    cluster.config_path.write_text(without_tenant(full, first))
    try:
        for node_id in cluster.node_ids:
            assert node_cli(cluster, "start", node_id).returncode == 0
        wait_for(lambda: all(health(cluster, n)[0] == 200 for n in cluster.node_ids), 30, "the one-tenant cluster")
        pids = {n: pid_of(cluster, n) for n in cluster.node_ids}
        cluster.config_path.write_text(full)  # the tenant inserted first: the running group's port would move
        done = cli("cluster", "restart-all", "--config", str(cluster.config_path))
        assert done.returncode == 1
        assert f"lists tenant(s) {first} before tenants the nodes already run" in done.stderr, done.stderr
        assert {n: pid_of(cluster, n) for n in cluster.node_ids} == pids  # nothing restarted
    finally:
        stop_every_node(cluster)
