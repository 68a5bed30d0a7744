"""Debian's prometheus scraping the three-node cluster with deploy/prometheus/'s rules: after two
scrapes, a PromQL histogram_quantile over the fire lag `_bucket` series answers a number for the
tenant, the recording rules evaluate, and every peer link of every group reports the AEAD frame."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from cluster_fixture import node_cluster, pick_port_runs, token  # noqa: F401 (the fixture)

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
SCRAPE_INTERVAL = "1s"
READY_TIMEOUT_S = 30.0
FIRE_LAG_P99 = ('histogram_quantile(0.99, sum by (le) '
                '(rate(queen_timers_fire_lag_seconds_bucket{job="queen-raft",tenant="acme"}[30s])))')


def scrape_config(targets: list[str]) -> str:
    """deploy/prometheus/scrape.yml with this cluster's nodes and a 1 s interval (JSON is YAML)."""
    return json.dumps({
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(DEPLOY / "queen-raft.rules.yml")],
        "scrape_configs": [{"job_name": "queen-raft", "static_configs": [{"targets": targets}]}],
    })


def query(base: str, promql: str) -> list:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def poll(base: str, promql: str, accept, timeout_s: float = READY_TIMEOUT_S) -> list:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = query(base, promql)
            if accept(last):
                return last
        except OSError as exc:  # not listening yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{promql}: not as expected within {timeout_s} s, last answer {last}")


def schedule_due_soon(cluster, count: int) -> None:
    ops = [{"op": "schedule", "queue": "prom-q", "timerKey": f"k{i}", "delayMs": 200 + 10 * i, "txn": f"prom-{i}",
            "payload": "eyJoaSI6MX0="} for i in range(count)]
    status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": ops})
    assert status == 200, body


def test_prometheus_scrapes_the_cluster_and_answers_the_fire_lag_quantile(node_cluster, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: apt-get install prometheus (.ci/run does it)"
    cluster = node_cluster
    schedule_due_soon(cluster, 50)
    targets = [cluster.url(node).removeprefix("http://") for node in cluster.node_ids]
    config = tmp_path / "prometheus.yml"
    config.write_text(scrape_config(targets))
    [port] = pick_port_runs(1, 1)
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "prometheus.log", "wb") as log:
        process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                    f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        # Two scrapes of every node.
        poll(base, 'count_over_time(up{job="queen-raft"}[1m]) >= 2', lambda result: len(result) == len(targets))
        schedule_due_soon(cluster, 50)  # fires between scrapes, so the rate over the window is not zero
        result = poll(base, FIRE_LAG_P99, lambda result: result and not math.isnan(float(result[0]["value"][1])))
        p99 = float(result[0]["value"][1])
        assert 0 <= p99 < 60, p99
        assert poll(base, 'tenant:queen_timers_quota_used:ratio{tenant="acme"}', bool)
        # Every link between nodes of this version carries the AEAD frame, seen from both of its
        # ends: one series per peer of each tenant's group on each node (docs/operations.md, Upgrades).
        links = poll(base, 'queen_raft_peer_links{job="queen-raft"}',
                     lambda result: result and all(s["metric"]["frame"] == "aead" for s in result))
        groups = query(base, 'queen_raft_term{job="queen-raft"}')  # one series per node and tenant
        assert len(links) == len(groups) * (len(targets) - 1), (links, groups)
        assert query(base, 'queen_raft_peer_links{job="queen-raft",frame!="aead"}') == []
        # Heartbeats and their answers cross each link of a group's leader both ways (two followers
        # have nothing to say to each other).
        assert poll(base, 'min(rate(queen_raft_peer_aead_frames_total{job="queen-raft"}[30s]) and on (instance, tenant) '
                          '(queen_raft_is_leader{job="queen-raft"} == 1)) > 0', bool)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
