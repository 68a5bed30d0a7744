"""The timer routes against three real node processes on 127.0.0.1 (docs/spec.md section 2)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest

from cluster_fixture import fetch_records, node_cluster, token  # noqa: F401  (node_cluster is a fixture)

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
RO = token("acme", "read-only")
WO = token("acme", "write-only")
# A consumer's long poll: long enough for any fire in these tests, short enough to fail fast.
POP_WAIT_MS = 5000


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def schedule_op(queue: str, key: str, delay_ms: int, txn: str, payload: bytes = b'{"n":1}', **extra) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay_ms, "txn": txn,
            "payload": b64(payload), **extra}


def post_timers(cluster, node: str, ops, token_text: str = RW):
    return cluster.call(node, "POST", "/api/v1/timers", token_text, {"operations": ops})


def fetch_all(cluster, node: str, queue: str, partition: str = "Default") -> list[dict]:
    return fetch_records(cluster, node, queue, partition)


def pop(cluster, node: str, queue: str, wait_ms: int = POP_WAIT_MS):
    return cluster.call(node, "GET", f"/api/v1/pop/queue/{queue}?wait=true&timeout={wait_ms}&batch=10", RW)


def settle_past(cluster, node: str, deliver_at_ms: int, margin_ms: int) -> None:
    """Waits until the host clock is past deliverAt + margin, then a linearizable read, so every
    tick the leader could have proposed for that instant has been applied where we look."""
    remaining = (deliver_at_ms + margin_ms) / 1000 - time.time()
    if remaining > 0:
        time.sleep(remaining)
    status, _, _ = cluster.call(node, "GET", "/api/v1/timers/settle/none", RO)
    assert status == 200


def test_schedule_then_pop_delivers_txn_message_id_payload_not_before_deliver_at(node_cluster):
    cluster = node_cluster
    queue, txn = unique("q"), unique("txn")
    status, _, body = post_timers(cluster, "n1", [schedule_op(queue, "k", 300, txn, b'{"hello":"world"}')], WO)
    assert status == 200, body
    scheduled = body["results"][0]
    assert (scheduled["ok"], scheduled["status"], scheduled["txn"]) == (True, "scheduled", txn)
    status, _, popped = pop(cluster, "n2", queue)
    received_ms = time.time() * 1000
    assert status == 200, popped
    [message] = popped["messages"]
    assert message["transactionId"] == txn
    assert message["messageId"] == scheduled["messageId"]
    assert message["payload"] == {"hello": "world"}
    assert message["createdAt"] >= scheduled["deliverAt"]
    assert received_ms >= scheduled["deliverAt"]


def test_cancel_before_the_fire_is_cancelled_and_nothing_is_delivered(node_cluster):
    cluster = node_cluster
    queue, txn = unique("q"), unique("txn")
    status, _, body = post_timers(cluster, "n1", [schedule_op(queue, "k", 400, txn)])
    deliver_at = body["results"][0]["deliverAt"]
    status, _, cancelled = cluster.call("n3", "DELETE", f"/api/v1/timers/{queue}/k?txn={txn}", RW)
    assert (status, cancelled) == (200, {"ok": True, "status": "cancelled", "queue": queue, "timerKey": "k", "txn": txn,
                                         "requestTxn": txn})
    settle_past(cluster, "n2", deliver_at, margin_ms=300)
    assert fetch_all(cluster, "n2", queue) == []
    status, _, _ = pop(cluster, "n1", queue, wait_ms=100)
    assert status == 204


def test_cancel_after_the_fire_answers_fired_and_every_node_names_the_same_message(node_cluster):
    cluster = node_cluster
    queue, txn = unique("q"), unique("txn")
    status, _, body = post_timers(cluster, "n2", [schedule_op(queue, "tenant/42", 0, txn)])  # due: fires in its own entry
    assert status == 200
    message_id = body["results"][0]["messageId"]
    status, _, answer = cluster.call("n1", "DELETE", f"/api/v1/timers/{queue}/tenant/42?txn=mine", RW)
    assert status == 200
    assert answer == {"ok": False, "status": "fired", "queue": queue, "timerKey": "tenant/42", "txn": txn,
                      "partition": "Default", "offset": 0, "messageId": message_id, "firedAt": answer["firedAt"],
                      "requestTxn": "mine"}
    records = fetch_all(cluster, "n3", queue)
    assert [(r["offset"], r["transactionId"], r["messageId"]) for r in records] == [(0, txn, message_id)]
    peek = {k: v for k, v in answer.items() if k not in ("ok", "requestTxn")}
    for node in ("n1", "n2", "n3"):
        status, _, seen = cluster.call(node, "GET", f"/api/v1/timers/{queue}/tenant/42", RO)
        assert (status, seen) == (200, {"found": False, **peek}), node


def test_a_timer_fired_by_the_leaders_tick_answers_fired_with_its_offset(node_cluster):
    cluster = node_cluster
    queue, txn = unique("q"), unique("txn")
    cluster.call("n1", "POST", "/api/v1/push", RW, {"items": [{"queue": queue, "payload": {"n": 0}}]})
    status, _, body = post_timers(cluster, "n3", [schedule_op(queue, "later", 300, txn)])
    assert status == 200
    settle_past(cluster, "n2", body["results"][0]["deliverAt"], 200)
    status, _, answer = cluster.call("n2", "DELETE", f"/api/v1/timers/{queue}/later", RW)
    assert (status, answer["status"], answer["txn"], answer["offset"], answer["requestTxn"]) == (
        200, "fired", txn, 1, None)
    assert answer["firedAt"] >= body["results"][0]["deliverAt"]
    assert [r["transactionId"] for r in fetch_all(cluster, "n1", queue)][1] == txn


def test_reschedule_replaces_the_timer(node_cluster):
    cluster = node_cluster
    queue, old_txn, new_txn = unique("q"), unique("old"), unique("new")
    status, _, first = post_timers(cluster, "n1", [schedule_op(queue, "k", 60_000, old_txn, b'"old"')])
    status, _, second = post_timers(cluster, "n1", [schedule_op(queue, "k", 200, new_txn, b'"new"', op="reschedule")])
    replaced = second["results"][0]
    assert (replaced["status"], replaced["txn"]) == ("rescheduled", new_txn)
    assert replaced["messageId"] != first["results"][0]["messageId"]
    status, _, popped = pop(cluster, "n3", queue)
    assert status == 200
    assert [(m["transactionId"], m["payload"]) for m in popped["messages"]] == [(new_txn, "new")]
    status, _, peek = cluster.call("n2", "GET", f"/api/v1/timers/{queue}/k", RO)
    assert (peek["found"], peek["status"], peek["txn"], peek["offset"]) == (False, "fired", new_txn, 0)
    assert [r["transactionId"] for r in fetch_all(cluster, "n2", queue)] == [new_txn]


def test_write_to_a_follower_works_and_reads_anywhere_see_it(node_cluster):
    cluster = node_cluster
    follower = cluster.role_of("acme", "follower")
    queue, txn = unique("q"), unique("txn")
    status, _, body = post_timers(cluster, follower, [schedule_op(queue, "k", 60_000, txn)])
    assert status == 200 and body["results"][0]["status"] == "scheduled"
    for node in cluster.node_ids:
        status, _, peek = cluster.call(node, "GET", f"/api/v1/timers/{queue}/k", RO)
        assert (status, peek["found"], peek["txn"], peek["messageId"]) == (200, True, txn, body["results"][0]["messageId"])
        status, _, page = cluster.call(node, "GET", f"/api/v1/timers/{queue}", RO)
        assert [r["timerKey"] for r in page["rows"]] == ["k"]
    status, _, answer = cluster.call(follower, "DELETE", f"/api/v1/timers/{queue}/k", RW)
    assert answer["status"] == "cancelled" and answer["txn"] == txn  # no ?txn: the removed timer's


def test_refusals_with_their_codes_change_nothing(node_cluster):
    cluster = node_cluster
    queue = unique("q")
    status, _, _ = cluster.call("n1", "POST", "/api/v1/configure", RW, {"queue": queue, "options": {"maxPayloadBytes": 16}})
    assert status == 200
    status, _, kept = post_timers(cluster, "n1", [schedule_op(queue, "kept", 60_000, "t-kept")])
    assert status == 200
    before = cluster.call("n1", "GET", f"/api/v1/timers/{queue}", RO)[2]

    good = schedule_op(queue, "new", 1000, "t-new")
    refusals = [
        # (token, body, status, error)
        (None, [good], 401, "unauthorized"),
        ("not-a-token", [good], 401, "unauthorized"),
        (RO, [good], 403, "forbidden"),
        (RW, [good, {**schedule_op(queue, "x", 5, "t"), "producerSub": "billing-service"}], 400, "timers_bad_request"),
        (RW, [good, {**schedule_op(queue, "x", 5, "t"), "messageId": "m"}], 400, "timers_bad_request"),
        (RW, [good, {**schedule_op(queue, "x", 5, "t"), "_secret": 1}], 400, "timers_bad_request"),
        (RW, [good, {**schedule_op(queue, "x", 5, "t"), "delayMs": 1.5}], 400, "timers_bad_request"),
        (RW, [good, {**schedule_op(queue, "x", 5, "t"), "payload": "***"}], 400, "timers_bad_request"),
        (RW, [good, {"op": "snooze", "queue": queue, "timerKey": "x"}], 400, "timers_bad_request"),
        (RW, [good, {"op": "schedule", "queue": queue, "timerKey": "x", "delayMs": 5, "payload": b64(b"1")}], 400, "timers_bad_request"),
        (RW, [good, {"op": "cancel", "queue": queue, "timerKey": "new"}], 400, "timers_bad_request"),
        (RW, [schedule_op(queue, f"k{i}", 5, f"t{i}") for i in range(257)], 400, "timers_bad_request"),
        (RW, [good, schedule_op(queue, "far", 7_776_000_001, "t-far")], 403, "timer_horizon_exceeded"),
        (RW, [good, schedule_op(queue, "big", 5, "t-big", b"x" * (1024 * 1024 + 1))], 413, "payload_too_large"),
        (RW, [good, schedule_op(queue, "past", -1, "t-past")], 400, "timers_bad_request"),
        # over the queue's maxPayloadBytes: refused in the entry, so it would never fail at the fire
        (RW, [good, schedule_op(queue, "over", 5, "t-over", b"x" * 17)], 413, "payload_too_large"),
    ]
    for token_text, ops, want_status, want_error in refusals:
        status, _, body = post_timers(cluster, "n2", ops, token_text)
        assert (status, body["error"]) == (want_status, want_error), body
        assert isinstance(body["message"], str) and body["message"]
    for token_text, want_status, want_error in [(None, 401, "unauthorized"), (WO, 403, "forbidden"), (RO, 403, "forbidden")]:
        status, _, body = cluster.call("n3", "DELETE", f"/api/v1/timers/{queue}/kept", token_text)
        assert (status, body["error"]) == (want_status, want_error)
    status, _, body = cluster.call("n3", "GET", f"/api/v1/timers/{queue}/kept", WO)
    assert (status, body["error"]) == (403, "forbidden")

    after = cluster.call("n3", "GET", f"/api/v1/timers/{queue}", RO)[2]
    assert after == before
    assert [r["timerKey"] for r in after["rows"]] == ["kept"]
    assert after["rows"][0]["messageId"] == kept["results"][0]["messageId"]
    assert fetch_all(cluster, "n1", queue) == []


def test_health_and_metrics_on_every_node(node_cluster):
    cluster = node_cluster
    leaders = set()
    for node in cluster.node_ids:
        status, body = cluster.health(node)
        assert status == 200 and body["status"] == "healthy" and body["node"] == node
        leaders |= {(tenant, group["leader"]) for tenant, group in body["groups"].items()}
    assert len(leaders) == 2  # every node agrees on each group's leader
    leader = cluster.role_of("acme", "leader")
    status, _, text = cluster.call(leader, "GET", "/metrics")
    assert status == 200
    for family in ("queen_timers_fire_lag_seconds_bucket", "queen_timers_pending", "queen_timers_fired_total",
                   "queen_billed_messages_total", "queen_messages_pushed_total", "queen_raft_term",
                   "queen_raft_commit_index", "queen_raft_commit_seconds_bucket", "queen_http_request_seconds_bucket",
                   "queen_raft_journal_flush_seconds_bucket", "queen_dlq_messages", "queen_timers_quota"):
        assert family in text, family
    assert 'queen_raft_is_leader{tenant="acme"} 1.0' in text


def test_operator_pause_refuses_schedules_with_hint_while_delete_and_fires_go_on(node_cluster):
    cluster = node_cluster
    admin = token("acme", "admin")
    queue = unique("q")
    status, _, body = post_timers(cluster, "n1", [schedule_op(queue, "due", 300, "t-due"), schedule_op(queue, "k", 60_000, "t-k")])
    assert status == 200
    status, _, answer = cluster.call("n2", "POST", "/api/v1/admin/timers/pause", admin)
    assert (status, answer["paused"]) == (200, True)
    try:
        for node in cluster.node_ids:  # the pause is replicated: every node refuses
            # A linearizable read first: the node has then applied everything up to the pause.
            assert cluster.call(node, "GET", f"/api/v1/timers/{queue}/k", RO)[0] == 200
            status, headers, refused = post_timers(cluster, node, [schedule_op(queue, "new", 5, "t"),
                                                                   {"op": "cancel", "queue": queue, "timerKey": "k"}])
            assert (status, refused["error"]) == (503, "timers_disabled")
            assert int(headers["Retry-After"]) >= 1
            assert headers["x-queen-timers-hint"] == f"DELETE /api/v1/timers/{queue}/k"
        status, _, popped = pop(cluster, "n3", queue)  # the fire is not stopped by the pause
        assert status == 200 and popped["messages"][0]["transactionId"] == "t-due"
        status, _, answer = cluster.call("n3", "DELETE", f"/api/v1/timers/{queue}/k", RW)
        assert (status, answer["status"]) == (200, "cancelled")
    finally:
        status, _, answer = cluster.call("n1", "POST", "/api/v1/admin/timers/resume", admin)
        assert (status, answer["paused"]) == (200, False)
    status, _, page = cluster.call("n1", "GET", f"/api/v1/timers/{queue}", RO)
    assert page["rows"] == []  # k cancelled by DELETE, "new" never scheduled
    assert [r["transactionId"] for r in fetch_all(cluster, "n1", queue)] == ["t-due"]


def test_long_polls_parked_on_the_leader_get_each_fire_once_with_auto_ack(node_cluster):
    # Their pops ride the leader's tick entries: each fire reaches one of them, none twice, and an
    # autoAck pop's messages are settled (a later pop finds nothing).
    import concurrent.futures

    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    queue = unique("q")
    txns = [unique("txn") for _ in range(3)]
    wait_ms = 1500  # past the fire (300 ms), short: one of the two polls always runs it out
    path = f"/api/v1/pop/queue/{queue}?wait=true&timeout={wait_ms}&batch=10&autoAck=true"
    received: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for index, txn in enumerate(txns):
            polls = [pool.submit(cluster.call, leader, "GET", path, RW) for _ in range(2)]
            time.sleep(0.2)  # both parked (or waiting) before the timer is due
            status, _, _ = post_timers(cluster, leader, [schedule_op(queue, f"k{index}", 300, txn)], WO)
            assert status == 200
            # One of the two gets the fire; the other answers 204 at its timeout.
            answers = [poll.result(timeout=wait_ms / 1000 + 5) for poll in polls]
            got = [m["transactionId"] for status, _, body in answers if status == 200 for m in body["messages"]]
            assert sorted(status for status, _, _ in answers) == [200, 204], answers
            received += got
    assert received == txns
    status, _, _ = cluster.call(leader, "GET", f"/api/v1/pop/queue/{queue}?autoAck=true&batch=10", RW)
    assert status == 204
