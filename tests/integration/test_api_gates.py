"""The gate ladder of POST /api/v1/timers on three real nodes, with a tiny quota and rate: each
refusal with its code, counted per node in queen_timers_schedule_rejected_total{reason}, and a
tenant that is paused, over its quota and out of rate tokens still cancels with DELETE."""

from __future__ import annotations

import pytest

from cluster_fixture import NodeCluster, token

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
ADMIN = token("acme", "admin")
# One call per node, then a token every 100 s: no refill can happen during the test.
RATE_PER_S = 0.01


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = NodeCluster(tmp_path_factory.mktemp("gates"),
                          settings={"timers_max_pending": 1, "timers_rate": RATE_PER_S}).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def schedule(key: str) -> dict:
    return {"operations": [{"op": "schedule", "queue": "gated", "timerKey": key, "delayMs": 600_000, "txn": key,
                            "payload": "AA=="}]}


def rejected(cluster: NodeCluster, node: str, reason: str) -> float:
    _, _, text = cluster.call(node, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(f'queen_timers_schedule_rejected_total{{reason="{reason}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_gates_refuse_in_order_are_counted_and_delete_still_cancels(cluster):
    n1, n2, n3 = cluster.node_ids
    status, _, body = cluster.call(n1, "POST", "/api/v1/timers", RW, schedule("a"))
    assert status == 200 and body["results"][0]["status"] == "scheduled"  # n1's only rate token; quota now full
    status, headers, body = cluster.call(n1, "POST", "/api/v1/timers", RW, {"operations": [
        {"op": "cancel", "queue": "gated", "timerKey": "a"}]})
    assert (status, body["error"]) == (429, "rate_limited")
    assert int(headers["Retry-After"]) >= 1
    assert headers["x-queen-timers-hint"] == "DELETE /api/v1/timers/gated/a"
    status, _, body = cluster.call(n2, "POST", "/api/v1/timers", RW, schedule("b"))  # n2's token, over the quota
    assert (status, body["error"]) == (403, "timers_quota_exceeded")
    status, _, _ = cluster.call(n3, "POST", "/api/v1/admin/timers/pause", ADMIN)
    assert status == 200
    status, headers, body = cluster.call(n3, "POST", "/api/v1/timers", RW, schedule("c"))
    assert (status, body["error"]) == (503, "timers_disabled") and "Retry-After" in headers
    assert rejected(cluster, n1, "rate_limited") == 1
    assert rejected(cluster, n2, "timers_quota_exceeded") == 1
    assert rejected(cluster, n3, "timers_disabled") == 1
    # Paused, over quota, and n1 has no rate token left: DELETE passes all three.
    status, _, body = cluster.call(n1, "DELETE", "/api/v1/timers/gated/a?txn=a", RW)
    assert (status, body["status"], body["txn"]) == (200, "cancelled", "a")
    status, _, usage = cluster.call(n2, "GET", "/api/v1/usage", ADMIN)
    assert usage["pendingTimers"] == 0 and usage["schedulingPaused"] is True


def test_pause_survives_a_restart_of_every_node(cluster):
    status, _, _ = cluster.call(cluster.node_ids[0], "POST", "/api/v1/admin/timers/pause", ADMIN)
    assert status == 200
    for node in cluster.node_ids:
        cluster.stop_node(node)
    for node in cluster.node_ids:
        cluster.start_node(node)
    cluster.wait_ready()
    for node in cluster.node_ids:
        status, _, usage = cluster.call(node, "GET", "/api/v1/usage", ADMIN)  # after the barrier: replayed
        assert (status, usage["schedulingPaused"]) == (200, True)
        status, _, body = cluster.call(node, "POST", "/api/v1/timers", RW, schedule(f"after-restart-{node}"))
        assert (status, body["error"]) == (503, "timers_disabled")
    status, _, body = cluster.call(cluster.node_ids[1], "POST", "/api/v1/admin/timers/resume", ADMIN)
    assert body["paused"] is False
