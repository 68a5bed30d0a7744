"""A burst of writes through a follower on three node processes: followers append only what they lack.

Stock pysyncobj 0.3.17 deleted and re-added already-applied entries whenever the leader resent an
overlapping range, logging CRITICAL "truncating already-applied log entries" (9 to 22 lines per
3,000-write burst here, measured). With follower_append.LogMatchingSyncObj there are none, the
overlaps are still there (counted as kept), and every replica ends with the same applied state.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from raft_node_fixture import NodeUnavailable, RaftTestCluster
from port_blocks import worker_port

pytestmark = pytest.mark.integration

# 3 Raft ports and 3 HTTP ports, in a block no other test or bench of this project uses.
RAFT_BASE_PORT = worker_port(17800)
HTTP_BASE_PORT = RAFT_BASE_PORT + 5
# A few thousand writes, 32 at a time: enough for the leader to resend overlapping ranges many
# times (stock logged 9-22 truncations per burst), ~2 s on the shared 2-core box.
BURST_WRITES = 3000
BURST_CONCURRENCY = 32
# A write answered 503 (busy, an election under load) is retried like a client would, this often.
WRITE_ATTEMPTS = 50
RETRY_SLEEP_S = 0.05
# After the burst every replica applies the last entries within a few heartbeats (50 ms each).
CONVERGE_TIMEOUT_S = 10.0
STOCK_TRUNCATION_LINE = "truncating already-applied"
BREACH_LINE = "Raft invariant broken"


def write_burst(node, total: int, concurrency: int) -> list[int]:
    """Writes k00000..k{total-1} through node from `concurrency` threads; the indexes that failed."""
    next_index = iter(range(total))
    lock = threading.Lock()
    failed: list[int] = []

    def writer():
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            for _ in range(WRITE_ATTEMPTS):
                try:
                    node.propose({"op": "set", "key": f"k{i:05d}", "value": i})
                    break
                except NodeUnavailable:
                    time.sleep(RETRY_SLEEP_S)
            else:
                failed.append(i)

    threads = [threading.Thread(target=writer) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failed


def wait_until_applied_everywhere(cluster: RaftTestCluster) -> list[dict]:
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while True:
        statuses = [node.status() for node in cluster.nodes]
        applied = {s["appliedIndex"] for s in statuses}
        if len(applied) == 1 and all(s["commitIndex"] == s["appliedIndex"] for s in statuses):
            return statuses
        assert time.monotonic() < deadline, f"replicas did not converge: {statuses}"
        time.sleep(0.05)


def test_a_follower_side_burst_truncates_nothing_and_every_replica_applies_the_same(tmp_path):
    cluster = RaftTestCluster(str(tmp_path), RAFT_BASE_PORT, HTTP_BASE_PORT).start()
    try:
        leader = cluster.wait_for_leader()
        follower = cluster.followers(leader)[0]

        assert write_burst(follower, BURST_WRITES, BURST_CONCURRENCY) == []

        statuses = wait_until_applied_everywhere(cluster)
        expected = {f"k{i:05d}": i for i in range(BURST_WRITES)}
        views = [(node.local("values"), node.local("applied"), node.local("ops")) for node in cluster.nodes]
        assert views[0][0] == expected
        assert views[1] == views[0] and views[2] == views[0], "replicas applied different entries"
        assert all(node.read("values") == expected for node in cluster.nodes)

        counters = [s["appendEntries"] for s in statuses]
        overlaps_kept = sum(c["overlapsKept"] for c in counters)
        # Not vacuous: the leader did resend ranges the followers held (where stock truncated).
        assert overlaps_kept > 0, counters
        assert all(c["conflictsRefused"] == 0 for c in counters), counters
    finally:
        cluster.stop()

    logs = {}
    for node in cluster.nodes:
        with open(node.log_path, errors="replace") as f:
            logs[node.index] = f.read()
    assert {i: text.count(STOCK_TRUNCATION_LINE) for i, text in logs.items()} == {0: 0, 1: 0, 2: 0}
    assert {i: text.count(BREACH_LINE) for i, text in logs.items()} == {0: 0, 1: 0, 2: 0}
    assert all(os.path.getsize(node.log_path) > 0 for node in cluster.nodes)  # the logs were written
