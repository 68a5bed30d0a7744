"""The Raft layer with the real TenantState: a 1 MiB timer payload schedules and fires on three
processes, and the fired message survives kill -9 of every node after a snapshot."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from raft_node_fixture import NodeUnavailable, RaftTestCluster
from port_blocks import worker_port

pytestmark = pytest.mark.integration

_PORT_BLOCKS = itertools.count(worker_port(17600), 10)
ONE_MIB = 1024 * 1024
# A fire lands within a tick of its instant; allow for a loaded machine and the HTTP round trips.
FIRE_WAIT_S = 5.0


@pytest.fixture
def cluster(tmp_path):
    base = next(_PORT_BLOCKS)
    cluster = RaftTestCluster(str(tmp_path), base, base + 5, extra_args=["--state", "tenant"]).start()
    yield cluster
    cluster.stop()


def schedule(key: str, payload: bytes, delay_ms: int) -> dict:
    return {
        "op": "timers", "producerSub": "raft-test", "maxPending": None,
        "ops": [{"op": "schedule", "queue": "q", "timerKey": key, "partition": "Default",
                 "delayMs": delay_ms, "txn": f"txn-{key}", "messageId": f"msg-{key}",
                 "payload": payload, "payloadZstd": False, "encrypted": False}],
    }


def wait_for_messages(node, count: int) -> list[dict]:
    deadline = time.monotonic() + FIRE_WAIT_S
    while True:
        messages = node.read("fetch:q")
        if len(messages) >= count or time.monotonic() > deadline:
            return messages
        time.sleep(0.05)


def test_one_mib_timer_payload_fires_once_on_every_replica_and_survives_full_restart(cluster):
    leader = cluster.wait_for_leader()
    follower = cluster.followers(leader)[0]
    payload = os.urandom(ONE_MIB)

    scheduled_at_ms = time.time() * 1000
    answer = follower.propose(schedule("big", payload, 300))
    (result,) = answer["results"]
    assert result["status"] == "scheduled" and result["deliverAt"] >= scheduled_at_ms + 300 - 50

    messages = wait_for_messages(leader, 1)
    assert [m["transactionId"] for m in messages] == ["txn-big"]
    assert messages[0]["payload"] == payload
    assert messages[0]["createdAt"] >= result["deliverAt"], "fired before its instant"
    for node in cluster.nodes:
        assert node.read("counters")["fired"]["appended"] == 1
        assert [m["messageId"] for m in node.read("fetch:q")] == ["msg-big"]

    for node in cluster.nodes:
        node.compact()
    deadline = time.monotonic() + 10
    while not all(os.path.exists(os.path.join(n.data_dir, "raft.snapshot")) for n in cluster.nodes):
        assert time.monotonic() < deadline, "no snapshot was written"
        time.sleep(0.05)
    cluster.kill_all()
    for node in cluster.nodes:
        node.start()
    leader = cluster.wait_for_leader()
    for node in cluster.nodes:
        kept = node.read("fetch:q")
        assert [m["transactionId"] for m in kept] == ["txn-big"] and kept[0]["payload"] == payload
        assert node.read("counters")["pendingTimers"] == 0


def test_pending_timers_fire_after_the_leader_is_killed(cluster):
    leader = cluster.wait_for_leader()
    for i in range(20):
        for _ in range(20):
            try:
                leader.propose(schedule(f"k{i:02d}", b"p%d" % i, 400 + 40 * i))
                break
            except NodeUnavailable as exc:
                time.sleep(min(exc.retry_after, 0.2))
    leader.kill()
    survivors = cluster.followers(leader)
    new_leader = cluster.wait_for_leader(among=survivors)
    messages = wait_for_messages(new_leader, 20)
    assert sorted(m["transactionId"] for m in messages) == [f"txn-k{i:02d}" for i in range(20)]
    assert survivors[0].read("fetch:q") == survivors[1].read("fetch:q")
