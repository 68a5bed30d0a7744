"""kill -9 of every node, then a restart: pending timers are still there and fire, acknowledged
pushes are still there. Its own cluster: the test kills every node."""

from __future__ import annotations

import base64
import signal
import time

import pytest

from cluster_fixture import fetch_records, own_node_cluster, token  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
RO = token("acme", "read-only")
PUSHES = 50
# Far enough that nothing fires before the kill, near enough to fire soon after the restart.
DUE_AFTER_RESTART_MS = 3000
FIRE_TIMEOUT_S = 15.0


@pytest.fixture
def cluster(own_node_cluster):
    return own_node_cluster


def test_full_kill_and_restart_keeps_timers_and_pushes(cluster):
    ops = [{"op": "schedule", "queue": "later", "timerKey": f"k{i}", "delayMs": DUE_AFTER_RESTART_MS + 10 * i,
            "txn": f"t{i}", "payload": base64.b64encode(b'{"i":%d}' % i).decode()} for i in range(20)]
    ops.append({"op": "schedule", "queue": "later", "timerKey": "far", "delayMs": 3_600_000, "txn": "t-far", "payload": ""})
    status, _, scheduled = cluster.call("n1", "POST", "/api/v1/timers", RW, {"operations": ops})
    assert status == 200
    deliver_at = {r["txn"]: r["deliverAt"] for r in scheduled["results"]}
    status, _, pushed = cluster.call("n2", "POST", "/api/v1/push", RW,
                                     {"items": [{"queue": "orders", "payload": {"n": i}, "transactionId": f"o{i}"} for i in range(PUSHES)]})
    assert status == 201

    for node in cluster.node_ids:
        assert cluster.stop_node(node, signal.SIGKILL) == -signal.SIGKILL
    for node in cluster.node_ids:
        cluster.start_node(node)
    cluster.wait_ready()

    assert [r["transactionId"] for r in fetch_records(cluster, "n3", "orders")] == [f"o{i}" for i in range(PUSHES)]
    status, _, peek = cluster.call("n3", "GET", "/api/v1/timers/later/far", RO)
    assert (peek["found"], peek["txn"]) == (True, "t-far")

    deadline = time.monotonic() + FIRE_TIMEOUT_S
    fired: list[dict] = []
    while time.monotonic() < deadline and len(fired) < 20:
        fired = fetch_records(cluster, "n1", "later")
        time.sleep(0.1)
    assert sorted(r["transactionId"] for r in fired) == sorted(f"t{i}" for i in range(20))
    assert all(r["createdAt"] >= deliver_at[r["transactionId"]] for r in fired)
    status, _, page = cluster.call("n2", "GET", "/api/v1/timers/later", RO)
    assert [r["timerKey"] for r in page["rows"]] == ["far"]
