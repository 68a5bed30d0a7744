"""POST pop against three real node processes: the acknowledgments of the body are settled and the
next batch popped in one call, and in one Raft entry (the leader's commit index grows by one per
round, where a pop then an ack grew it by two); a wrong lease is that item's verdict; a malformed
body changes nothing; the acks are settled before the long poll parks."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import jsonschema
import pytest

from cluster_fixture import node_cluster, token  # noqa: F401  (node_cluster is a fixture)
from queen_raft.api.openapi import response_schema
from queen_raft.client import Queen

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
ROUNDS = 4
BATCH = 25
POLL_S = 0.02


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def checked(cluster, node: str, method: str, route: str, path: str, body=None):
    """One call, its answer validated against the document's schema for (route, method, status)."""
    status, _, answer = cluster.call(node, method, path, RW, body)
    assert status != 0, f"{node} did not answer {method} {path}"
    schema = response_schema(route, method, status)
    if schema is not None:
        jsonschema.validate(answer, schema, cls=jsonschema.Draft202012Validator)
    return status, answer


POP = "/api/v1/pop/queue/{queue}"


def push(cluster, node: str, queue: str, txns: list[str]) -> None:
    status, _ = checked(cluster, node, "POST", "/api/v1/push", "/api/v1/push",
                        body={"items": [{"queue": queue, "payload": {"t": t}, "transactionId": t} for t in txns]})
    assert status == 201


def acks_of(popped: dict, status: str = "completed") -> dict:
    return {"leaseId": popped["leaseId"], "acknowledgments": [
        {"partition": m["partition"], "transactionId": m["transactionId"], "status": status}
        for m in popped["messages"]]}


def commit_index(cluster, leader: str) -> int:
    status, body = cluster.health(leader)
    assert status == 200, body
    return body["groups"]["acme"]["commitIndex"]


def wait_for_a_quiet_log(cluster, leader: str, quiet_s: float = 1.0, timeout_s: float = 20.0) -> None:
    """Until the group's commit index holds still for quiet_s: a group just started commits a few
    entries of its own (its first leader's), which would count against the rounds measured."""
    deadline = time.monotonic() + timeout_s
    last, since = commit_index(cluster, leader), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = commit_index(cluster, leader)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    raise AssertionError(f"the commit index kept moving for {timeout_s} s")


def test_a_round_of_ack_then_pop_is_one_entry_where_pop_then_ack_was_two(node_cluster):
    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    wait_for_a_quiet_log(cluster, leader)
    follower = cluster.role_of("acme", "follower")
    queue = unique("rounds")
    txns = [f"m{i}" for i in range(BATCH * (3 * ROUNDS + 1))]
    push(cluster, leader, queue, txns)
    taken: list[str] = []
    path = f"/api/v1/pop/queue/{queue}?batch={BATCH}"

    before = commit_index(cluster, leader)
    for _ in range(ROUNDS):  # the two-call round: pop, then ack
        status, popped = checked(cluster, leader, "GET", POP, path)
        assert status == 200
        taken += [m["transactionId"] for m in popped["messages"]]
        status, acked = checked(cluster, leader, "POST", "/api/v1/ack/batch", "/api/v1/ack/batch", acks_of(popped))
        assert status == 200 and all(v["success"] for v in acked["results"])
    two_calls = commit_index(cluster, leader) - before

    status, popped = checked(cluster, leader, "GET", POP, path)
    taken += [m["transactionId"] for m in popped["messages"]]
    for node in (leader, follower):  # through the leader, and through a follower (it forwards the entry)
        before = commit_index(cluster, leader)
        for _ in range(ROUNDS):
            status, answer = checked(cluster, node, "POST", POP, path, acks_of(popped))
            assert status == 200 and [v["success"] for v in answer["acknowledgments"]] == [True] * BATCH
            assert len(answer["messages"]) == BATCH
            popped = answer
            taken += [m["transactionId"] for m in popped["messages"]]
        assert commit_index(cluster, leader) - before == ROUNDS, f"through {node}"
    assert two_calls == 2 * ROUNDS
    assert taken == txns  # each message once, in order: every ack settled before its call's pop


def test_a_wrong_lease_answers_invalid_lease_and_the_call_still_pops(node_cluster):
    leader = node_cluster.role_of("acme", "leader")
    queue = unique("wrong-lease")
    push(node_cluster, leader, queue, ["a", "b"])
    status, answer = checked(node_cluster, leader, "POST", POP, f"/api/v1/pop/queue/{queue}?batch=10", {
        "leaseId": "no-such-lease", "acknowledgments": [{"partition": "Default", "transactionId": "a"}]})
    assert status == 200
    assert (answer["acknowledgments"][0]["success"], answer["acknowledgments"][0]["error"]) == (False, "invalid_lease")
    assert [m["transactionId"] for m in answer["messages"]] == ["a", "b"]


@pytest.mark.parametrize("body", [
    {"leaseId": "l", "acknowledgments": []},
    {"leaseId": "l", "acknowledgments": [{"partition": "Default", "status": "completed"}]},
    {"leaseId": "l", "acknowledgments": [{"offset": 0}], "extra": 1},
])
def test_a_malformed_body_is_400_and_changes_nothing(node_cluster, body):
    leader = node_cluster.role_of("acme", "leader")
    queue = unique("malformed")
    push(node_cluster, leader, queue, ["a"])
    wait_for_a_quiet_log(node_cluster, leader, quiet_s=0.3)
    before = commit_index(node_cluster, leader)
    status, answer = checked(node_cluster, leader, "POST", POP, f"/api/v1/pop/queue/{queue}", body)
    assert (status, answer["error"]) == (400, "bad_request")
    assert commit_index(node_cluster, leader) == before
    status, popped = checked(node_cluster, leader, "GET", POP, f"/api/v1/pop/queue/{queue}")
    assert status == 200 and popped["messages"][0]["deliveryAttempt"] == 1  # no lease was taken


def test_the_acks_are_settled_before_the_long_poll_parks_and_it_answers_the_next_push(node_cluster):
    leader = node_cluster.role_of("acme", "leader")
    follower = node_cluster.role_of("acme", "follower")
    queue = unique("long-poll")
    push(node_cluster, leader, queue, ["a"])
    status, popped = checked(node_cluster, leader, "GET", POP, f"/api/v1/pop/queue/{queue}")
    assert status == 200
    answers: list = []
    waiting = threading.Thread(target=lambda: answers.append(checked(
        node_cluster, follower, "POST", POP, f"/api/v1/pop/queue/{queue}?wait=true&timeout=20000",
        acks_of(popped, "dlq"))))
    waiting.start()
    deadline = time.monotonic() + 10.0
    rows: list = []
    while not rows and time.monotonic() < deadline:
        status, page = checked(node_cluster, leader, "GET", "/api/v1/dlq", f"/api/v1/dlq?queue={queue}")
        rows = page["rows"]
        time.sleep(POLL_S)
    assert [r["transactionId"] for r in rows] == ["a"], "the ack was not settled while the call waits"
    assert waiting.is_alive()
    push(node_cluster, leader, queue, ["b"])
    waiting.join(timeout=15.0)
    assert not waiting.is_alive()
    status, answer = answers[0]
    assert status == 200
    assert [m["transactionId"] for m in answer["messages"]] == ["b"]
    assert answer["acknowledgments"] == [{"index": 0, "success": True, "dlq": True}]


def test_nothing_after_the_wait_answers_200_with_the_verdicts(node_cluster):
    leader = node_cluster.role_of("acme", "leader")
    queue = unique("empty")
    push(node_cluster, leader, queue, ["a"])
    status, popped = checked(node_cluster, leader, "GET", POP, f"/api/v1/pop/queue/{queue}")
    status, answer = checked(node_cluster, leader, "POST", POP, f"/api/v1/pop/queue/{queue}?wait=true&timeout=300",
                             acks_of(popped))
    assert status == 200
    assert answer == {"leaseId": None, "messages": [], "acknowledgments": [{"index": 0, "success": True, "dlq": False}]}


def test_the_sdk_loop_sends_each_batchs_acks_with_the_next_pop_one_entry_a_round(node_cluster):
    leader = node_cluster.role_of("acme", "leader")
    queue = unique("sdk")
    txns = [f"s{i}" for i in range(BATCH * (ROUNDS + 1))]
    push(node_cluster, leader, queue, txns)
    wait_for_a_quiet_log(node_cluster, leader)

    async def consume() -> tuple[list[str], list[int]]:
        taken, entries = [], []
        async with Queen(urls=[node_cluster.url(n) for n in node_cluster.node_ids], token=RW) as q:
            async for batch in q.consume_batches(queue, group="sdk", batch=BATCH, wait="2s"):
                entries.append(commit_index(node_cluster, leader))
                taken += [m.transaction_id for m in batch]
                assert all(a.success for a in batch.previous_acks)
                batch.ack_rest()
                if len(entries) == ROUNDS + 1:
                    return taken, entries
        raise AssertionError("the loop ended")

    taken, entries = asyncio.run(consume())
    assert taken == txns
    assert [b - a for a, b in zip(entries, entries[1:])] == [1] * ROUNDS
