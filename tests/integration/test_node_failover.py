"""kill -9 of a tenant's leader while 1,000 timers come due over 5 s: every fire exactly once, none early, and the
killed node catches up when restarted. Its own cluster: the test kills a node."""

from __future__ import annotations

import base64
import signal
import time
import uuid

import pytest

from cluster_fixture import fetch_records, own_node_cluster, token  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
RO = token("acme", "read-only")
TIMERS = 1000
# Due over this window, and the leader is killed in the middle of it.
SPREAD_MS = 5000
KILL_AFTER_S = 2.0
# Failover is ~0.3 s median and ~2 s worst measured; after the window, give fires this long to land.
DRAIN_TIMEOUT_S = 15.0
BATCH = 100


@pytest.fixture
def cluster(own_node_cluster):
    return own_node_cluster


def fetch_txns(cluster, node: str, queue: str) -> list[tuple[str, int]]:
    return [(r["transactionId"], r["createdAt"]) for r in fetch_records(cluster, node, queue)]


def test_leader_kill_fires_every_timer_exactly_once_never_early(cluster):
    queue = f"q-{uuid.uuid4().hex[:8]}"
    leader = cluster.role_of("acme", "leader")
    survivor = next(n for n in cluster.node_ids if n != leader)
    deliver_at: dict[str, int] = {}
    for start in range(0, TIMERS, BATCH):
        ops = [{"op": "schedule", "queue": queue, "timerKey": f"k{i}", "delayMs": 300 + i * SPREAD_MS // TIMERS,
                "txn": f"t{i}", "payload": base64.b64encode(b'{"i":%d}' % i).decode()} for i in range(start, start + BATCH)]
        status, _, body = cluster.call(survivor, "POST", "/api/v1/timers", RW, {"operations": ops})
        assert status == 200, body
        deliver_at.update({r["txn"]: r["deliverAt"] for r in body["results"]})

    time.sleep(KILL_AFTER_S)
    assert cluster.stop_node(leader, signal.SIGKILL) == -signal.SIGKILL

    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    fired: list[tuple[str, int]] = []
    while time.monotonic() < deadline:
        status, _, body = cluster.call(survivor, "POST", "/api/v1/fetch", RO,
                                       {"entries": [{"queue": queue, "partition": "Default", "offset": 0, "limit": 1000}]})
        if status == 200:
            fired = [(r["transactionId"], r["createdAt"]) for r in body["entries"][0]["records"]]
            if len(fired) >= TIMERS:
                break
        time.sleep(0.1)
    txns = [txn for txn, _ in fired]
    assert sorted(txns) == sorted(deliver_at), f"{len(set(txns))} distinct of {TIMERS}, {len(txns)} records"
    assert len(txns) == len(set(txns))  # exactly once
    early = [(txn, created, deliver_at[txn]) for txn, created in fired if created < deliver_at[txn]]
    assert early == []
    status, _, page = cluster.call(survivor, "GET", f"/api/v1/timers/{queue}", RO)
    assert page["rows"] == []

    # a write after the failover, through any surviving node
    status, _, body = cluster.call(survivor, "POST", "/api/v1/timers", RW,
                                   {"operations": [{"op": "schedule", "queue": queue, "timerKey": "after", "delayMs": 60_000,
                                                    "txn": "t-after", "payload": ""}]})
    assert status == 200 and body["results"][0]["status"] == "scheduled"

    # the killed node restarts from its journal and catches up
    cluster.start_node(leader)
    cluster.wait_ready()
    status, _, peek = cluster.call(leader, "GET", f"/api/v1/timers/{queue}/after", RO)
    assert (status, peek["found"]) == (200, True)
    assert sorted(txn for txn, _ in fetch_txns(cluster, leader, queue)) == sorted(deliver_at)
