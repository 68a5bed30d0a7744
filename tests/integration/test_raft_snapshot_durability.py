"""Whole-cluster stops while forked snapshot writers run, and damaged snapshots at start.

Three real node processes of one group (raft_node_fixture.py, the test state). The test state's
snapshot() can be slowed (--snapshot-delay-s): it runs in the forked snapshot writer, so a test
holds writers alive across a kill -9 or a SIGTERM of every node, the window in which a writer
that outlived its node could rename a stale snapshot over its successor's.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cluster_fixture import pick_port_runs
from proc_children import children_of, process_running
from raft_node_fixture import NodeUnavailable, RaftTestCluster

pytestmark = pytest.mark.integration


COMPACTION_ENTRIES = 20
# Long enough that every node's writer is still running when all nodes stop, and still running
# when their successors have started and compacted on their own.
SNAPSHOT_DELAY_S = 5.0
TIMERS_PER_BATCH = 8
PENDING_DELAY_MS = 3_600_000
WRITE_DEADLINE_S = 30.0
EXIT_SNAPSHOT_REFUSED = 65


@pytest.fixture
def make_cluster(tmp_path):
    clusters = []

    def make(extra_args=None) -> RaftTestCluster:
        # Free ports picked at random: other test runs on this machine use fixed 17xxx blocks.
        raft_base, http_base = pick_port_runs(2, 3)
        cluster = RaftTestCluster(str(tmp_path), raft_base, http_base, extra_args=extra_args)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.stop()


def wait_until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class TimerWriter:
    """Schedules batches of pending timers through the leader; remembers the acknowledged keys."""

    def __init__(self, cluster: RaftTestCluster) -> None:
        self.cluster = cluster
        self.acknowledged: list[str] = []
        self.batches = 0

    def write_batch(self) -> None:
        keys = [f"b{self.batches:05d}-{i}" for i in range(TIMERS_PER_BATCH)]
        self.batches += 1
        deadline = time.monotonic() + WRITE_DEADLINE_S
        while True:
            leader = self.cluster.wait_for_leader()
            try:
                leader.propose({"op": "timers", "keys": keys, "delayMs": PENDING_DELAY_MS})
            except (NodeUnavailable, OSError):
                assert time.monotonic() < deadline, "a batch of timers never committed"
                time.sleep(0.1)
                continue
            self.acknowledged.extend(keys)
            return


def stop_every_node(cluster: RaftTestCluster, stop_signal: int) -> None:
    if stop_signal == signal.SIGKILL:
        cluster.kill_all()
    else:
        cluster.stop()  # SIGTERM, and waits for each node to exit


def start_every_node_at_once(cluster: RaftTestCluster) -> None:
    """All three processes spawned together, as an operator restarting a cluster would."""
    failures: list[BaseException] = []

    def start(node) -> None:
        try:
            node.start()
        except BaseException as exc:  # reported on the test's thread below
            failures.append(exc)

    starters = [threading.Thread(target=start, args=(node,)) for node in cluster.nodes]
    for starter in starters:
        starter.start()
    for starter in starters:
        starter.join()
    assert not failures, failures


def missing_per_node(cluster: RaftTestCluster, acknowledged: list[str]) -> dict[int, int]:
    missing = {}
    for node in cluster.nodes:
        present = node.read("timers")
        missing[node.index] = sum(1 for key in acknowledged if key not in present)
    return missing


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_stopping_every_node_while_snapshot_writers_run_loses_no_acknowledged_timer(make_cluster, stop_signal):
    base_args = ["--compaction-entries", str(COMPACTION_ENTRIES)]
    cluster = make_cluster(base_args + ["--snapshot-delay-s", str(SNAPSHOT_DELAY_S)])
    writer = TimerWriter(cluster)
    deadline = time.monotonic() + WRITE_DEADLINE_S
    while not all(children_of(node.process.pid) for node in cluster.nodes):
        assert time.monotonic() < deadline, "no snapshot writer on every node"
        writer.write_batch()
    writers_forked = [pid for node in cluster.nodes for pid in children_of(node.process.pid)]
    # Acknowledged after every writer took its copy of the state: in no snapshot being written.
    for _ in range(2 * COMPACTION_ENTRIES):
        writer.write_batch()
    writers_at_stop = [pid for node in cluster.nodes for pid in children_of(node.process.pid)]
    assert set(writers_forked) <= set(writers_at_stop), "a writer ended before the stop: raise SNAPSHOT_DELAY_S"

    stop_every_node(cluster, stop_signal)
    # The successors write snapshots at full speed: each compacts several times while the writers
    # of the first generation (if they outlived their nodes) are still running.
    for node in cluster.nodes:
        node.extra_args = list(base_args)
    start_every_node_at_once(cluster)
    for _ in range(5 * COMPACTION_ENTRIES):
        writer.write_batch()
    wait_until(lambda: not any(process_running(pid) for pid in writers_at_stop), SNAPSHOT_DELAY_S + 20,
               "the first generation's snapshot writers to end")

    cluster.stop()
    start_every_node_at_once(cluster)
    missing = missing_per_node(cluster, writer.acknowledged)
    assert missing == {node.index: 0 for node in cluster.nodes}, (
        f"acknowledged timers missing per node, of {len(writer.acknowledged)}: {missing}\n{cluster.logs()}"
    )


def write_until_every_node_has_a_snapshot(cluster: RaftTestCluster, writer: TimerWriter) -> None:
    deadline = time.monotonic() + WRITE_DEADLINE_S
    while not all(os.path.exists(os.path.join(n.data_dir, "raft.snapshot")) for n in cluster.nodes):
        assert time.monotonic() < deadline, "no snapshot on every node"
        writer.write_batch()


def truncate_to_half(path: str) -> bytes:
    with open(path, "rb") as file:
        data = file.read()
    with open(path, "r+b") as file:
        file.truncate(len(data) // 2)
    return data[: len(data) // 2]


def test_a_node_whose_snapshot_is_damaged_refuses_to_start_and_rejoins_after_a_wipe(make_cluster):
    """Stock pysyncobj logged "failed to load full dump" and went on with an empty state
    (appliedIndex 1) that voted, could lead, and answered reads without the committed timers."""
    cluster = make_cluster(["--compaction-entries", str(COMPACTION_ENTRIES)])
    writer = TimerWriter(cluster)
    write_until_every_node_has_a_snapshot(cluster, writer)
    leader = cluster.wait_for_leader()
    damaged = cluster.followers(leader)[0]
    damaged.stop()
    snapshot_path = os.path.join(damaged.data_dir, "raft.snapshot")
    truncate_to_half(snapshot_path)

    with pytest.raises(RuntimeError, match="exited with 65"):
        damaged.start()
    log_text = damaged.log_tail()
    assert f"refusing to start: {snapshot_path}: the snapshot cannot be loaded" in log_text
    assert "wipe this node's data dir and restart it; it re-syncs from the others" in log_text
    assert missing_per_node_alive(cluster, writer.acknowledged) == 0

    # The recovery step the message names.
    for name in os.listdir(damaged.data_dir):
        os.remove(os.path.join(damaged.data_dir, name))
    damaged.start()
    wait_until(lambda: _local_timers(damaged) >= set(writer.acknowledged), WRITE_DEADLINE_S,
               "the wiped node to re-sync")


def missing_per_node_alive(cluster: RaftTestCluster, acknowledged: list[str]) -> int:
    """Acknowledged timers missing on any running node (barrier reads)."""
    return max(sum(1 for key in acknowledged if key not in node.read("timers")) for node in cluster.nodes if node.alive)


def _local_timers(node) -> set[str]:
    try:
        return set(node.local("timers"))
    except OSError:
        return set()


def snapshot_covers_the_log(node) -> bool:
    """The node's last snapshot is at its last applied entry's predecessor (pysyncobj snapshots
    there), no writer runs: a compaction now would find nothing new to write."""
    status = node.status()
    return status["snapshotIndex"] == status["appliedIndex"] - 1 and not status["snapshotWriting"]


def test_a_wiped_node_never_installs_a_damaged_snapshot_from_the_leader(make_cluster):
    """Stock pysyncobj sent its snapshot file as it was and the follower renamed it into place
    before loading it: a truncated snapshot on the leader broke every node that re-synced from it.
    And a leader that refused its damaged file kept it as long as the group applied nothing new:
    pysyncobj writes no snapshot at the index it last wrote, so the wiped node never caught up."""
    cluster = make_cluster(["--compaction-entries", str(COMPACTION_ENTRIES)])
    writer = TimerWriter(cluster)
    write_until_every_node_has_a_snapshot(cluster, writer)
    for _ in range(COMPACTION_ENTRIES // 2):
        writer.write_batch()
    leader = cluster.wait_for_leader()
    # The leader's snapshot holds its whole applied log (as after a quiet compaction), and the
    # group stays idle from here on.
    leader.compact()
    wait_until(lambda: snapshot_covers_the_log(leader), WRITE_DEADLINE_S, "the leader's snapshot of its whole log")
    wiped = cluster.followers(leader)[0]
    wiped.stop()
    for name in os.listdir(wiped.data_dir):
        os.remove(os.path.join(wiped.data_dir, name))
    damaged_bytes = truncate_to_half(os.path.join(leader.data_dir, "raft.snapshot"))
    wiped_snapshot = os.path.join(wiped.data_dir, "raft.snapshot")

    def installed_or_refused() -> bool:
        if os.path.exists(wiped_snapshot):
            with open(wiped_snapshot, "rb") as file:
                assert file.read() != damaged_bytes, "the follower installed the leader's damaged snapshot"
            return True
        return "not sending the snapshot to a follower: it does not verify" in leader.log_tail(20_000)

    wiped.start()
    wait_until(installed_or_refused, WRITE_DEADLINE_S, "the leader to send or refuse its snapshot")
    # The leader writes a new snapshot on its own (it verifies): the wiped node installs that one.
    wait_until(lambda: _local_timers(wiped) >= set(writer.acknowledged), WRITE_DEADLINE_S,
               "the wiped node to re-sync from a good snapshot")
    assert "the snapshot does not verify: writing a new one from the state in memory" in leader.log_tail(20_000)
