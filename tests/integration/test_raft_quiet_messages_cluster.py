"""Raft messages per entry on three node processes (queen_raft/raft/quiet_messages.py): the leader
leaves out the commit-only AppendEntries its coalesced send already carried, followers leave out
answers that repeat their last one; an idle group keeps its leader, and a lone write still reaches
the followers' state at once.
"""

from __future__ import annotations

import threading
import time

import pytest

from cluster_fixture import pick_port_runs
from raft_node_fixture import NodeUnavailable, RaftTestCluster

pytestmark = pytest.mark.integration

CLIENTS = 32
LOAD_S = 3.0
WRITE_ATTEMPTS = 50
RETRY_SLEEP_S = 0.05
# Stock pysyncobj exchanges 4 messages per entry on each leader-follower link under this load
# (the entry, its answer, the commit-only AppendEntries after the apply, its answer); a message
# that carries several entries brings it below that. With the repeats left out, about 2 are left.
MESSAGES_PER_ENTRY_MAX = 3.0
# Longer than leader_fallback_timeout_s (2.5 s): a leader that heard no answer for that long would
# step down.
IDLE_S = 4.0
# A heartbeat period long enough that a follower which waited for the next heartbeat to learn a
# commit would miss APPLY_BOUND_S by far; the election timeouts scaled to it (> 3 periods).
SLOW_HEARTBEAT_ARGS = ["--append-entries-period-s", "0.8", "--election-min-s", "2.6", "--election-max-s", "3.4"]
APPLY_BOUND_S = 0.4
LONE_WRITES = 5


def cluster_on_free_ports(tmp_path, extra_args=None) -> RaftTestCluster:
    raft_base, http_base = pick_port_runs(2, 3)
    return RaftTestCluster(str(tmp_path), raft_base, http_base, extra_args=extra_args).start()


def propose(node, command) -> dict:
    for _ in range(WRITE_ATTEMPTS):
        try:
            return node.propose(command)
        except NodeUnavailable:
            time.sleep(RETRY_SLEEP_S)
    raise AssertionError(f"{command} never committed through {node.raft_addr}")


def single_op_load(node, seconds: float, clients: int) -> int:
    """Single-timer schedules from `clients` threads for `seconds`; how many were answered."""
    stop_at = time.monotonic() + seconds
    done = [0] * clients

    def client(i: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            propose(node, {"op": "timer", "key": f"c{i}-{n}", "delayMs": 600_000})
            n += 1
        done[i] = n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done)


def messages(cluster, leader) -> dict:
    """The leader's AppendEntries and the followers' answers so far, and the leader's commit index."""
    statuses = {node.index: node.status() for node in cluster.nodes}
    followers = cluster.followers(leader)
    return {
        "commit": statuses[leader.index]["commitIndex"],
        "appendEntries": statuses[leader.index]["raftMessages"]["appendEntriesSent"],
        "answers": sum(statuses[f.index]["raftMessages"]["answersSent"] for f in followers),
        "appendEntriesSkipped": statuses[leader.index]["raftMessages"].get("appendEntriesSkipped", 0),
        "answersSkipped": sum(statuses[f.index]["raftMessages"].get("answersSkipped", 0) for f in followers),
        "leaders": {s["leader"] for s in statuses.values()},
        "terms": {s["term"] for s in statuses.values()},
    }


def wait_until_applied_everywhere(cluster, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = [node.status() for node in cluster.nodes]
        if len({s["appliedIndex"] for s in statuses}) == 1 and all(s["commitIndex"] == s["appliedIndex"] for s in statuses):
            return
        assert time.monotonic() < deadline, f"replicas did not converge: {statuses}"
        time.sleep(0.05)


def test_single_op_load_costs_fewer_messages_per_entry_and_an_idle_group_keeps_its_leader(tmp_path):
    cluster = cluster_on_free_ports(tmp_path)
    try:
        leader = cluster.wait_for_leader()
        followers = cluster.followers(leader)
        before = messages(cluster, leader)

        writes = single_op_load(leader, LOAD_S, CLIENTS)
        wait_until_applied_everywhere(cluster)
        after = messages(cluster, leader)

        entries = after["commit"] - before["commit"]
        assert writes > 0 and entries > 0
        per_link = ((after["appendEntries"] - before["appendEntries"]) + (after["answers"] - before["answers"])) \
            / len(followers) / entries
        assert per_link <= MESSAGES_PER_ENTRY_MAX, (per_link, entries, writes, before, after)
        # Both levers did their part.
        assert after["appendEntriesSkipped"] > before["appendEntriesSkipped"], (before, after)
        assert after["answersSkipped"] > before["answersSkipped"], (before, after)

        # Idle for longer than leader_fallback_timeout_s: heartbeats still get their answers, so the
        # leader keeps its majority and nobody stands.
        idle_start = messages(cluster, leader)
        time.sleep(IDLE_S)
        idle_end = messages(cluster, leader)
        assert idle_end["leaders"] == idle_start["leaders"] == {leader.raft_addr}, (idle_start, idle_end)
        assert idle_end["terms"] == idle_start["terms"] and len(idle_end["terms"]) == 1, (idle_start, idle_end)
        assert leader.status()["role"] == "leader"
        # Heartbeats go every 50-100 ms (the period, then the next poll) and each is answered; a
        # quarter of the least of that leaves room for a loaded machine and still needs answers.
        assert idle_end["answers"] - idle_start["answers"] >= len(followers) * IDLE_S / 0.1 / 4, (idle_start, idle_end)
    finally:
        cluster.stop()


def test_a_follower_applies_a_lone_write_without_waiting_for_a_heartbeat(tmp_path):
    cluster = cluster_on_free_ports(tmp_path, SLOW_HEARTBEAT_ARGS)
    try:
        leader = cluster.wait_for_leader()
        followers = cluster.followers(leader)
        wait_until_applied_everywhere(cluster)
        late = []
        for i in range(LONE_WRITES):
            applied = propose(leader, {"op": "set", "key": f"lone{i}", "value": i})["applied"]
            answered_at = time.monotonic()
            pending = set(f.index for f in followers)
            while pending and time.monotonic() - answered_at < APPLY_BOUND_S:
                pending = {f.index for f in followers if f.index in pending and f.status()["appliedIndex"] < leader.status()["appliedIndex"]}
            if pending:
                late.append((i, applied, sorted(pending)))
            time.sleep(0.1)
        assert late == [], late
    finally:
        cluster.stop()
