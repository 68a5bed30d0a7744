"""The routes of docs/spec.md section 3 against three real node processes: a saga (ack, KV put, timer) in one
transaction and its rollback, KV, configure, lease extend, ack batch, DLQ, usage, and every answer
checked against the OpenAPI document the nodes serve."""

from __future__ import annotations

import base64
import json
import uuid

import jsonschema
import pytest

from cluster_fixture import node_cluster, token  # noqa: F401  (node_cluster is a fixture)
from queen_raft.api.openapi import document, response_schema

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
RO = token("acme", "read-only")
ADMIN = token("acme", "admin")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def checked(cluster, node: str, method: str, route: str, path: str, token_text: str | None = RW, body=None):
    """One call, its answer validated against the document's schema for (route, method, status)."""
    status, headers, answer = cluster.call(node, method, path, token_text, body)
    assert status != 0, f"{node} did not answer {method} {path}"
    schema = response_schema(route, method, status)
    if schema is not None:
        jsonschema.validate(answer, schema, cls=jsonschema.Draft202012Validator)
    return status, headers, answer


def push_and_pop(cluster, node: str, queue: str, txns: list[str], group: str | None = None) -> dict:
    status, _, _ = checked(cluster, node, "POST", "/api/v1/push", "/api/v1/push",
                           body={"items": [{"queue": queue, "payload": {"txn": t}, "transactionId": t} for t in txns]})
    assert status == 201
    query = f"?batch={len(txns)}" + (f"&consumerGroup={group}" if group else "")
    status, _, popped = checked(cluster, node, "GET", "/api/v1/pop/queue/{queue}", f"/api/v1/pop/queue/{queue}{query}")
    assert status == 200 and [m["transactionId"] for m in popped["messages"]] == txns
    return popped


def saga(queue: str, booking: str, lease_id: str, txn: str, kv_extra: list | None = None) -> dict:
    return {
        "operations": [{"type": "ack", "consumerGroup": "bookings", "leaseId": lease_id, "transactionId": txn,
                        "status": "completed"}],
        "kv": [{"op": "put", "ns": "bookings", "key": booking, "value": {"state": "held"}, "ttlSeconds": 604800},
               *(kv_extra or [])],
        "timers": [{"op": "schedule", "queue": queue, "timerKey": booking, "partition": booking, "delayMs": 900_000,
                    "txn": f"expire-{booking}", "payload": b64(json.dumps({"type": "hold-expired"}).encode())}],
    }


def test_saga_commits_ack_kv_and_timer_together_seen_from_every_node(node_cluster):
    queue, booking = unique("bookings"), unique("b")
    follower = node_cluster.role_of("acme", "follower")
    popped = push_and_pop(node_cluster, follower, queue, ["req-1"], group="bookings")
    status, _, body = checked(node_cluster, follower, "POST", "/api/v1/transaction", "/api/v1/transaction",
                              body=saga(queue, booking, popped["leaseId"], "req-1"))
    assert status == 200 and body["success"] is True, body
    assert [r.get("status") for r in body["results"]][2] == "scheduled"
    for node in node_cluster.node_ids:
        _, _, peek = checked(node_cluster, node, "GET", "/api/v1/timers/{queue}/{timerKey}",
                             f"/api/v1/timers/{queue}/{booking}", RO)
        assert peek["found"] is True and peek["partition"] == booking
        _, _, row = checked(node_cluster, node, "GET", "/api/v1/kv/{ns}/{key}", f"/api/v1/kv/bookings/{booking}", RO)
        assert row["value"] == {"state": "held"} and row["version"] == 1
    # Acked: nothing more to pop for the group.
    status, _, _ = node_cluster.call(follower, "GET", f"/api/v1/pop/queue/{queue}?consumerGroup=bookings", RW)
    assert status == 204


def test_saga_rollback_leaves_no_ack_no_kv_and_no_timer_and_keeps_a_cancelled_one(node_cluster):
    queue, booking = unique("bookings"), unique("b")
    leader = node_cluster.role_of("acme", "leader")
    checked(node_cluster, leader, "POST", "/api/v1/timers", "/api/v1/timers", body={"operations": [
        {"op": "schedule", "queue": queue, "timerKey": "kept", "delayMs": 900_000, "txn": "k", "payload": b64(b"1")}]})
    popped = push_and_pop(node_cluster, leader, queue, ["req-2"], group="bookings")
    body = saga(queue, booking, popped["leaseId"], "req-2",
                kv_extra=[{"op": "check", "ns": "bookings", "key": "lock", "expectedVersion": 5}])
    body["timers"].append({"op": "cancel", "queue": queue, "timerKey": "kept"})
    status, _, answer = checked(node_cluster, leader, "POST", "/api/v1/transaction", "/api/v1/transaction", body=body)
    assert (status, answer["success"], answer["reason"], answer["index"]) == (200, False, "kv_precondition", 2)
    for node in node_cluster.node_ids:
        _, _, peek = node_cluster.call(node, "GET", f"/api/v1/timers/{queue}/{booking}", RO)
        assert peek["found"] is False
        _, _, peek = node_cluster.call(node, "GET", f"/api/v1/timers/{queue}/kept", RO)
        assert peek["found"] is True  # the cancel shared the rollback
        _, _, row = node_cluster.call(node, "GET", f"/api/v1/kv/bookings/{booking}", RO)
        assert row["found"] is False
    # Not acked: the lease still covers it, and the rolled-back ack can be made again.
    status, _, answer = checked(node_cluster, leader, "POST", "/api/v1/ack/batch", "/api/v1/ack/batch", body={
        "consumerGroup": "bookings", "leaseId": popped["leaseId"], "acknowledgments": [{"transactionId": "req-2"}]})
    assert answer["results"][0]["success"] is True


def test_transaction_bad_request_is_400_and_rejected_ack_is_a_rollback(node_cluster):
    node = node_cluster.node_ids[1]
    status, _, answer = checked(node_cluster, node, "POST", "/api/v1/transaction", "/api/v1/transaction",
                                body={"timers": [{"op": "schedule", "queue": "q", "timerKey": "k"}]})
    assert (status, answer["reason"], answer["index"]) == (400, "bad_request", 0)
    status, _, answer = checked(node_cluster, node, "POST", "/api/v1/transaction", "/api/v1/transaction", body={
        "operations": [{"type": "ack", "leaseId": "no-such-lease", "offset": 0}]})
    assert (status, answer["success"], answer["reason"]) == (200, False, "rejected_ack")


def test_kv_routes_and_batch_precondition(node_cluster):
    ns = unique("ns")
    nodes = node_cluster.node_ids
    status, _, row = checked(node_cluster, nodes[0], "PUT", "/api/v1/kv/{ns}/{key}", f"/api/v1/kv/{ns}/a/b",
                             body={"value": [1, 2], "forever": True})
    assert (status, row["version"], row["key"]) == (200, 1, "a/b")
    _, _, row = checked(node_cluster, nodes[1], "GET", "/api/v1/kv/{ns}/{key}", f"/api/v1/kv/{ns}/a/b", RO)
    assert row["value"] == [1, 2]  # linearizable: the write is seen from another node at once
    status, _, body = checked(node_cluster, nodes[2], "POST", "/api/v1/kv", "/api/v1/kv", body={"ops": [
        {"op": "incr", "ns": ns, "key": "n", "by": 5}, {"op": "check", "ns": ns, "key": "a/b", "expectedVersion": 2}]})
    assert (status, body["error"], body["index"]) == (409, "kv_precondition", 1)
    _, _, row = node_cluster.call(nodes[0], "GET", f"/api/v1/kv/{ns}/n", RO)
    assert row["found"] is False
    _, _, body = checked(node_cluster, nodes[2], "POST", "/api/v1/kv", "/api/v1/kv", body={"ops": [
        {"op": "incr", "ns": ns, "key": "n", "by": 5}, {"op": "check", "ns": ns, "key": "a/b", "expectedVersion": 1}]})
    assert body["results"][0]["value"] == 5
    _, _, row = checked(node_cluster, nodes[0], "DELETE", "/api/v1/kv/{ns}/{key}", f"/api/v1/kv/{ns}/a/b")
    assert row["found"] is True
    status, _, _ = checked(node_cluster, nodes[0], "PUT", "/api/v1/kv/{ns}/{key}", f"/api/v1/kv/{ns}/x", RO,
                           body={"value": 1})
    assert status == 403


def test_configure_merge_and_replace_and_lease_extend(node_cluster):
    queue = unique("cfg")
    node = node_cluster.node_ids[0]
    _, _, body = checked(node_cluster, node, "POST", "/api/v1/configure", "/api/v1/configure",
                         body={"queue": queue, "options": {"leaseTime": 10, "retryLimit": 7}})
    assert (body["options"]["leaseTime"], body["options"]["retryLimit"]) == (10, 7)
    _, _, body = checked(node_cluster, node, "POST", "/api/v1/configure", "/api/v1/configure",
                         body={"queue": queue, "options": {"retryLimit": 1}})
    assert (body["options"]["leaseTime"], body["options"]["retryLimit"]) == (10, 1)  # merge keeps leaseTime
    _, _, body = checked(node_cluster, node, "POST", "/api/v1/configure", "/api/v1/configure",
                         body={"queue": queue, "options": {"retryLimit": 2}, "mode": "replace"})
    assert (body["options"]["leaseTime"], body["options"]["retryLimit"]) == (300, 2)  # replace: the rest default
    status, _, body = checked(node_cluster, node, "POST", "/api/v1/configure", "/api/v1/configure",
                              body={"queue": queue, "options": {"leaseTime": "long"}})
    assert (status, body["error"]) == (400, "bad_request")
    popped = push_and_pop(node_cluster, node, queue, ["e1"])
    status, _, body = checked(node_cluster, node_cluster.node_ids[2], "POST", "/api/v1/lease/{leaseId}/extend",
                              f"/api/v1/lease/{popped['leaseId']}/extend", body={"seconds": 60})
    assert status == 200 and body["leaseId"] == popped["leaseId"]
    status, _, body = checked(node_cluster, node, "POST", "/api/v1/lease/{leaseId}/extend",
                              "/api/v1/lease/nope/extend", body={"seconds": 60})
    assert (status, body["error"]) == (404, "invalid_lease")


def test_ack_batch_statuses_dlq_list_replay_and_usage(node_cluster):
    queue = unique("dlq")
    nodes = node_cluster.node_ids
    checked(node_cluster, nodes[0], "POST", "/api/v1/configure", "/api/v1/configure",
            body={"queue": queue, "options": {"retryLimit": 0}})
    _, _, before = checked(node_cluster, nodes[0], "GET", "/api/v1/usage", "/api/v1/usage", ADMIN)
    popped = push_and_pop(node_cluster, nodes[0], queue, ["a", "b", "c", "d"])
    _, _, body = checked(node_cluster, nodes[1], "POST", "/api/v1/ack/batch", "/api/v1/ack/batch", body={
        "leaseId": popped["leaseId"], "acknowledgments": [
            {"transactionId": "a", "status": "completed"}, {"transactionId": "b", "status": "failed", "error": "x"},
            {"transactionId": "c", "status": "retry"}, {"transactionId": "d", "status": "dlq"}]})
    assert [r["dlq"] for r in body["results"]] == [False, True, False, True]
    _, _, listed = checked(node_cluster, nodes[2], "GET", "/api/v1/dlq", f"/api/v1/dlq?queue={queue}", RO)
    assert sorted(r["transactionId"] for r in listed["rows"]) == ["b", "d"]
    row = listed["rows"][0]
    status, _, replayed = checked(node_cluster, nodes[2], "POST", "/api/v1/dlq/{dlqId}/replay",
                                  f"/api/v1/dlq/{row['dlqId']}/replay")
    assert (status, replayed["status"]) == (200, "queued")
    status, _, body = checked(node_cluster, nodes[0], "POST", "/api/v1/dlq/{dlqId}/replay",
                              f"/api/v1/dlq/{row['dlqId']}/replay")
    assert (status, body["error"]) == (404, "not_found")
    usages = [checked(node_cluster, n, "GET", "/api/v1/usage", "/api/v1/usage", ADMIN)[2] for n in nodes]
    assert all(u == usages[0] for u in usages)  # replicated counters: every node answers the same
    assert usages[0]["billedMessages"] - before["billedMessages"] == 4  # the pushes; acks and replays bill nothing
    status, _, _ = checked(node_cluster, nodes[0], "GET", "/api/v1/usage", "/api/v1/usage", RW)
    assert status == 403


def test_every_node_serves_the_openapi_document_and_it_is_valid_openapi_3_1(node_cluster):
    from jsonschema.validators import Draft202012Validator
    from schemathesis.openapi import from_dict

    expected = json.loads(json.dumps(document()))
    for node in node_cluster.node_ids:
        status, _, served = node_cluster.call(node, "GET", "/api/v1/openapi.json")
        # servers: the address the document was fetched from, so a generated client calls that node
        assert status == 200 and served.pop("servers") == [{"url": node_cluster.url(node)}]
        assert served == expected
    schema = from_dict(expected)  # schemathesis parses and resolves it as OpenAPI 3.1
    assert {op.path for op in (result.ok() for result in schema.get_all_operations())} >= {
        "/api/v1/transaction", "/api/v1/kv/{ns}/{key}", "/api/v1/dlq/{dlqId}/replay", "/api/v1/usage"}
    for name, component in expected["components"]["schemas"].items():
        Draft202012Validator.check_schema(component)
