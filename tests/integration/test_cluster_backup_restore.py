"""`cluster backup` under load, then wipe, `cluster restore` and start: the state comes back whole.

Real nodes. Pending timers (scheduled to fall due after the restore), KV values and unconsumed
messages are written, the backup runs while a writer keeps proposing to other keys, the cluster is
stopped and its data dirs removed, the backup restored, the nodes started: every pending timer
fires exactly once, KV and messages are equal to what they were, and a retried push is still
refused as a duplicate by the restored dedup window.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

from cluster_fixture import REPO, TENANTS, own_node_cluster, token  # noqa: F401 (fixture)
from cluster_cli_fixture import wait_for

TIMERS = int(os.environ.get("QUEEN_BACKUP_TEST_TIMERS", "10000"))
TIMER_BATCH = 250
# Long enough that no timer falls due before the backup is taken; short enough to fire soon after.
TIMER_DELAY_MS = 25_000
KV_KEYS = 50
MESSAGES = 40
FETCH_PAGE = 1000


def queen_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queen_raft", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def schedule_timers(cluster) -> None:
    for start in range(0, TIMERS, TIMER_BATCH):
        ops = [{"op": "schedule", "queue": "reminders", "timerKey": f"k-{i}", "delayMs": TIMER_DELAY_MS,
                "txn": f"t-{i}", "payload": "eA=="} for i in range(start, min(start + TIMER_BATCH, TIMERS))]
        status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": ops})
        assert status == 200, body


def write_kv_and_messages(cluster) -> None:
    for i in range(KV_KEYS):
        status, _, body = cluster.call("n1", "PUT", f"/api/v1/kv/carts/user-{i}", token("acme", "read-write"),
                                       {"value": {"items": [i, i + 1]}, "forever": True})
        assert status == 200, body
    items = [{"queue": "orders", "payload": {"id": i}, "transactionId": f"o-{i}"} for i in range(MESSAGES)]
    status, _, body = cluster.call("n1", "POST", "/api/v1/push", token("acme", "read-write"), {"items": items})
    assert status in (200, 201), body


def records(cluster, node_id: str, queue: str) -> list[dict]:
    found: list[dict] = []
    while True:
        status, _, body = cluster.call(node_id, "POST", "/api/v1/fetch", token("acme", "read-only"), {
            "entries": [{"queue": queue, "partition": "Default", "offset": len(found), "limit": FETCH_PAGE}]})
        assert status == 200, body
        page = body["entries"][0]["records"]
        if not page:
            return found
        found += page


def kv_values(cluster, node_id: str) -> dict:
    values = {}
    for i in range(KV_KEYS):
        status, _, body = cluster.call(node_id, "GET", f"/api/v1/kv/carts/user-{i}", token("acme", "read-write"))
        assert status == 200, body
        values[i] = body["value"]
    return values


def pending_timers(cluster, node_id: str) -> int:
    status, _, body = cluster.call(node_id, "GET", "/api/v1/usage", token("acme", "admin"))
    assert status == 200, body
    return body["pendingTimers"]


class LoadWriter(threading.Thread):
    """Proposes KV puts to keys the test never compares, until stopped: the backup runs under load."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.cluster, self.stopping, self.acknowledged = cluster, threading.Event(), 0

    def run(self) -> None:
        while not self.stopping.is_set():
            status, _, _ = self.cluster.call("n2", "PUT", f"/api/v1/kv/load/k-{self.acknowledged % 100}",
                                             token("acme", "read-write"), {"value": self.acknowledged, "forever": True})
            self.acknowledged += status == 200


def test_backup_under_load_then_restore_into_empty_data_dirs(own_node_cluster, tmp_path):
    cluster = own_node_cluster
    schedule_timers(cluster)
    write_kv_and_messages(cluster)
    messages_before, kv_before = records(cluster, "n1", "orders"), kv_values(cluster, "n1")
    load = LoadWriter(cluster)
    load.start()
    try:
        wait_for(lambda: load.acknowledged > 0, 10, "the load writer's first acknowledged write")
        backup = queen_cli("cluster", "backup", "--config", str(cluster.config_path), "--out", str(tmp_path / "backup"))
    finally:
        load.stopping.set()
        load.join()
    assert backup.returncode == 0, backup.stderr
    assert f"[{len(TENANTS)}/{len(TENANTS)}]" in backup.stdout, backup.stdout
    assert load.acknowledged > 0
    assert pending_timers(cluster, "n1") == TIMERS  # none fell due before the backup was taken
    status, _, body = cluster.call("n1", "GET", "/api/v1/admin/snapshot", token("acme", "read-write"))
    assert status == 403, body  # the state of a whole tenant: admin tokens only

    assert cluster.stop() == {n: 0 for n in cluster.node_ids}
    shutil.rmtree(cluster.data_dir)
    restore = queen_cli("cluster", "restore", "--config", str(cluster.config_path), "--from", str(tmp_path / "backup"))
    assert restore.returncode == 0, restore.stderr
    for node_id in cluster.node_ids:
        cluster.start_node(node_id)
    cluster.wait_ready()

    assert records(cluster, "n3", "orders") == messages_before
    assert kv_values(cluster, "n3") == kv_before
    status, _, body = cluster.call("n2", "POST", "/api/v1/push", token("acme", "read-write"),
                                   {"items": [{"queue": "orders", "payload": {"id": 0}, "transactionId": "o-0"}]})
    assert status in (200, 201) and body["results"][0]["status"] == "duplicate", body

    deadline_s = TIMER_DELAY_MS / 1000 + 30
    wait_for(lambda: pending_timers(cluster, "n1") == 0, deadline_s, "every restored timer to fire")
    fired = records(cluster, "n2", "reminders")
    txns = [record["transactionId"] for record in fired]
    assert len(txns) == TIMERS and set(txns) == {f"t-{i}" for i in range(TIMERS)}
    for node_id in cluster.node_ids:  # every replica fired the same messages
        wait_for(lambda n=node_id: len(records(cluster, n, "reminders")) == TIMERS, 10, f"{node_id} caught up")
