"""Snapshots of a node process (`python -m queen_raft node`): one whose snapshot is damaged refuses to
start with exit code 65 and one message naming the file and the recovery step, and re-syncs after
that step; a snapshot writer never outlives its node."""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from cluster_fixture import NodeCluster, running_cluster, token
from proc_children import children_of, process_running

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
RO = token("acme", "read-only")
COMPACTION_ENTRIES = 20
TIMERS = 3 * COMPACTION_ENTRIES
DEADLINE_S = 30.0


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def schedule_one(cluster: NodeCluster, i: int) -> None:
    op = {"op": "schedule", "queue": "later", "timerKey": f"k{i}", "delayMs": 3_600_000, "txn": f"t{i}",
          "payload": ""}
    status, _, body = cluster.call("n1", "POST", "/api/v1/timers", RW, {"operations": [op]})
    assert status == 200, body


def timer_found(cluster: NodeCluster, node_id: str, i: int) -> bool:
    status, _, peek = cluster.call(node_id, "GET", f"/api/v1/timers/later/k{i}", RO)
    return status == 200 and peek["found"]


def test_a_node_with_a_damaged_snapshot_exits_65_and_rejoins_after_a_wipe(tmp_path):
    with running_cluster(tmp_path, settings={"log_compaction_min_entries": COMPACTION_ENTRIES}) as cluster:
        for i in range(TIMERS):
            schedule_one(cluster, i)
        snapshot = cluster.data_dir / "n3" / "acme" / "raft.snapshot"
        wait_until(snapshot.exists, "a snapshot on n3")
        assert cluster.stop_node("n3") == 0
        data = snapshot.read_bytes()
        snapshot.write_bytes(data[: len(data) // 2])

        cluster.start_node("n3")
        process = cluster.processes["n3"]
        wait_until(lambda: process.poll() is not None, "n3 to refuse to start")
        assert process.returncode == 65, cluster.log_tail("n3")
        log_text = cluster.log_path("n3").read_text()
        assert f"refusing to start: {snapshot}: the snapshot cannot be loaded" in log_text
        assert "wipe this node's data dir and restart it; it re-syncs from the others" in log_text
        assert "failed to load full dump" not in log_text

        shutil.rmtree(cluster.data_dir / "n3")
        cluster.start_node("n3")
        cluster.wait_ready()
        assert all(timer_found(cluster, "n3", i) for i in range(TIMERS))


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_snapshot_writer_never_outlives_its_node(tmp_path, stop_signal):
    """The writers are held alive by the test hook (QUEEN_TEST_SNAPSHOT_WRITER_DELAY_MS); stock
    pysyncobj's writer outlived its node on kill -9 and SIGTERM alike, holding its ports."""
    env = {"QUEEN_TEST_HOOKS": "1", "QUEEN_TEST_SNAPSHOT_WRITER_DELAY_MS": "60000"}
    with running_cluster(tmp_path, settings={"log_compaction_min_entries": COMPACTION_ENTRIES}, env=env) as cluster:
        i = 0
        while not children_of(cluster.processes["n1"].pid):
            assert i < 10 * TIMERS, "no snapshot writer on n1"
            schedule_one(cluster, i)
            i += 1
        writers = children_of(cluster.processes["n1"].pid)
        cluster.stop_node("n1", stop_signal)
        wait_until(lambda: not any(process_running(pid) for pid in writers), "n1's writer to end with it")
        cluster.start_node("n1")  # its ports are free at once
        cluster.wait_ready()
