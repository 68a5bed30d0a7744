"""A follower whose data dir is lost starts empty and catches up while a writer keeps going.

The leader compacts its log often here (log_compaction_min_entries), so by the time the wiped node
comes back the start of the log is gone from every journal: the node can only catch up by a
snapshot install, then the entries after it. A bounded writer schedules timers through the leader
the whole time, some due within seconds (they fire during the catch-up) and most an hour out
(pending). At the end every acknowledged timer is on every node, as a pending row or as exactly one
fired message, and the three replicas answer the same lists (each read goes through the node's own
replica after a read barrier).
"""

from __future__ import annotations

import shutil
import signal
import threading

from cluster_fixture import fetch_records, running_cluster, token
from cluster_cli_fixture import wait_for

MAX_BATCHES = 3000  # the bound: the test stops the writer well before it
BATCHES_AFTER_CATCH_UP = 30
BATCH = 10
DUE_EVERY = 5  # one timer in five falls due within seconds
DUE_DELAY_MS = 2_000
PENDING_DELAY_MS = 3_600_000
COMPACTION_ENTRIES = 50
RW = token("acme", "read-write")


class TimerWriter(threading.Thread):
    """Schedules batches through one node until stopped (at most MAX_BATCHES); a batch refused or
    unanswered is sent again (schedules are idempotent on their txn) until it is acknowledged."""

    def __init__(self, cluster, node_id: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.node_id = cluster, node_id
        self.acknowledged: list[int] = []
        self.failure: str | None = None
        self.stopping = threading.Event()

    @property
    def batches(self) -> int:
        return len(self.acknowledged) // BATCH

    def run(self) -> None:
        for batch in range(MAX_BATCHES):
            if self.stopping.is_set():
                return
            numbers = range(batch * BATCH, (batch + 1) * BATCH)
            ops = [{"op": "schedule", "queue": "due" if i % DUE_EVERY == 0 else "later", "timerKey": f"k{i}",
                    "delayMs": DUE_DELAY_MS if i % DUE_EVERY == 0 else PENDING_DELAY_MS, "txn": f"t{i}",
                    "payload": ""} for i in numbers]
            for _ in range(50):
                status, _, body = self.cluster.call(self.node_id, "POST", "/api/v1/timers", RW, {"operations": ops})
                if status == 200:
                    self.acknowledged += numbers
                    break
            else:
                self.failure = f"batch {batch} never acknowledged: {status} {body}"
                return


def pending_keys(cluster, node_id: str) -> list[str]:
    keys, after = [], None
    while True:
        path = "/api/v1/timers/later?limit=500" + (f"&after={after}" if after else "")
        status, _, body = cluster.call(node_id, "GET", path, RW)
        assert status == 200, body
        keys += [row["timerKey"] for row in body["rows"]]
        if not body["nextAfter"]:
            return keys
        after = body["nextAfter"]


def fired_txns(cluster, node_id: str) -> list[str]:
    return [record["transactionId"] for record in fetch_records(cluster, node_id, "due")]


def test_a_wiped_follower_catches_up_under_load_and_ends_equal(tmp_path):
    with running_cluster(tmp_path, settings={"log_compaction_min_entries": COMPACTION_ENTRIES}) as cluster:
        leader, victim = cluster.role_of("acme", "leader"), cluster.role_of("acme", "follower")
        writer = TimerWriter(cluster, leader)
        writer.start()
        wait_for(lambda: len(writer.acknowledged) >= 30 * BATCH, 60, "the first acknowledged batches")
        assert cluster.stop_node(victim, signal.SIGKILL) == -signal.SIGKILL
        wait_for((cluster.data_dir / leader / "acme" / "raft.snapshot").exists, 30, "a compaction on the leader")
        shutil.rmtree(cluster.data_dir / victim)
        assert writer.is_alive(), writer.failure
        log_before_restart = cluster.log_path(victim).stat().st_size  # the log is appended across starts
        cluster.start_node(victim)
        cluster.wait_ready()
        wait_for(lambda: "installed a snapshot from the leader" in cluster.log_path(victim).read_bytes()[
            log_before_restart:].decode("utf-8", "replace"), 30, f"{victim} to install the leader's snapshot")
        caught_up_at = writer.batches
        wait_for(lambda: writer.batches >= caught_up_at + BATCHES_AFTER_CATCH_UP or not writer.is_alive(), 60,
                 "more writes after the catch-up")
        writer.stopping.set()
        writer.join(timeout=60)
        assert not writer.is_alive() and writer.failure is None, writer.failure

        later = sorted(f"k{i}" for i in writer.acknowledged if i % DUE_EVERY)
        due = sorted(f"t{i}" for i in writer.acknowledged if i % DUE_EVERY == 0)
        assert len(later) + len(due) == writer.batches * BATCH
        for node_id in cluster.node_ids:
            wait_for(lambda n=node_id: sorted(pending_keys(cluster, n)) == later, 30, f"{node_id}'s pending timers")
            wait_for(lambda n=node_id: sorted(fired_txns(cluster, n)) == due, 30, f"{node_id}'s fired timers")
        # Same order too: each replica applied the same fires in the same order.
        assert fired_txns(cluster, victim) == fired_txns(cluster, leader)
        assert (cluster.data_dir / victim / "acme" / "raft.snapshot").exists()
