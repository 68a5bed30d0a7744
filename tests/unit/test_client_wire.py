"""The SDK's builders put exactly the docs/spec.md wire on the line: paths, queries and bodies."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
import zstandard

from queen_raft.client import PreconditionFailed, PushRefused, Queen, TransactionRefused
from queen_raft.client.consumer import Message
from test_client_transport import FAST, ScriptedNode

SCHEDULE_ANSWER = {"results": [{"ok": True, "status": "scheduled", "queue": "reminders", "timerKey": "order-9137",
                                "txn": "t", "messageId": "m", "deliverAt": 123}]}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture
async def node():
    started = await ScriptedNode(replies=[(200, {}, {})]).start()
    yield started
    await started.close()


@pytest.fixture
async def queen(node):
    async with Queen(urls=[node.url], token="tok", retry=FAST) as q:
        yield q


async def test_schedule_body_is_the_spec_op(node, queen):
    node.replies = [(200, SCHEDULE_ANSWER, {})]
    result = await (queen.timer("reminders").key("order-9137").delay("24h").partition("p").txn("t")
                    .payload({"orderId": 9137}).schedule())
    [seen] = node.seen
    assert (seen.method, seen.raw_path) == ("POST", "/api/v1/timers")
    assert seen.body == {"operations": [{
        "op": "schedule", "queue": "reminders", "timerKey": "order-9137", "delayMs": 86_400_000, "txn": "t",
        "payload": b64(b'{"orderId":9137}'), "partition": "p"}]}
    assert (result.ok, result.status, result.timer_key, result.deliver_at, result.message_id) == (
        True, "scheduled", "order-9137", 123, "m")


async def test_schedule_mints_a_txn_per_call_and_omits_the_default_partition(node, queen):
    node.replies = [(200, SCHEDULE_ANSWER, {})]
    timer = queen.timer("reminders").key("k")
    await timer.delay(timedelta(minutes=15)).payload(b"\x00\xff").schedule()
    await timer.delay("250ms").payload(b"\x00\xff").schedule()
    first, second = (s.body["operations"][0] for s in node.seen)
    assert "partition" not in first
    assert first["delayMs"] == 900_000 and second["delayMs"] == 250
    assert first["payload"] == b64(b"\x00\xff")
    assert isinstance(first["txn"], str) and len(first["txn"]) >= 16
    assert first["txn"] != second["txn"]  # a reschedule is a new message: a new txn


async def test_zstd_payload_is_compressed_and_flagged(node, queen):
    node.replies = [(200, SCHEDULE_ANSWER, {})]
    await queen.timer("q").key("k").delay("1s").payload({"big": "x" * 1000}, zstd=True).schedule()
    op = node.seen[0].body["operations"][0]
    assert op["payloadZstd"] is True
    compressed = base64.b64decode(op["payload"])
    assert len(compressed) < 1000
    assert json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(compressed)) == {"big": "x" * 1000}


async def test_builder_is_immutable_and_refuses_incomplete_schedules(queen):
    base = queen.timer("q").key("k")
    base.delay("1s")
    assert base.spec.delay is None
    with pytest.raises(ValueError, match="delay"):
        await base.payload(1).schedule()
    with pytest.raises(ValueError, match="payload"):
        await base.delay("1s").schedule()
    with pytest.raises(ValueError):
        base.delay("soon")


async def test_cancel_peek_and_list_paths(node, queen):
    node.replies = [(200, {"ok": False, "status": "absent", "queue": "q", "timerKey": "tenant/42 x?%", "txn": "t1"}, {})]
    result = await queen.timer("q").key("tenant/42 x?%").txn("t1").cancel()
    node.replies = [(200, {"found": True, "queue": "q", "timerKey": "a", "deliverAt": 9, "payload": b64(b'{"n":1}'),
                           "payloadZstd": False, "encrypted": False, "attempts": 0}, {})]
    peek = await queen.timer("q").key("a").peek()
    node.replies = [(200, {"rows": [], "truncated": False, "nextAfter": None}, {})]
    await queen.timer("my queue").list(limit=50, after="k9")
    cancel, get, listing = node.seen
    assert (cancel.method, cancel.raw_path) == ("DELETE", "/api/v1/timers/q/tenant/42%20x%3F%25?txn=t1")
    assert (result.ok, result.status, result.txn) == (False, "absent", "t1")
    assert (get.method, get.raw_path) == ("GET", "/api/v1/timers/q/a")
    assert (peek.found, peek.deliver_at, peek.payload) == (True, 9, {"n": 1})
    assert listing.raw_path.split("?")[0] == "/api/v1/timers/my%20queue"
    assert listing.query == {"limit": "50", "after": "k9"}


FIRED = {"status": "fired", "queue": "q", "timerKey": "k", "txn": "fired-txn", "partition": "eu", "offset": 4711,
         "messageId": "m-1", "firedAt": 1767225600010}


async def test_cancel_and_peek_after_the_fire_carry_where_the_message_went(node, queen):
    node.replies = [(200, {"ok": False, **FIRED, "requestTxn": "sent"}, {}), (200, {"found": False, **FIRED}, {})]
    result = await queen.timer("q").key("k").txn("sent").cancel()
    peek = await queen.timer("q").key("k").peek()
    assert (result.ok, result.fired, result.dead_lettered, result.txn, result.partition, result.offset,
            result.message_id, result.fired_at, result.request_txn) == (
        False, True, False, "fired-txn", "eu", 4711, "m-1", 1767225600010, "sent")
    assert (peek.found, peek.status, peek.fired, peek.txn, peek.partition, peek.offset, peek.message_id,
            peek.fired_at) == (False, "fired", True, "fired-txn", "eu", 4711, "m-1", 1767225600010)


async def test_a_dead_lettered_answer_carries_its_dlq_id(node, queen):
    dead = {**FIRED, "status": "dead_lettered", "dlqId": "dlq-7"}
    del dead["offset"]
    node.replies = [(200, {"ok": False, **dead, "requestTxn": None}, {}), (200, {"found": False, **dead}, {})]
    result = await queen.timer("q").key("k").cancel()
    peek = await queen.timer("q").key("k").peek()
    assert (result.dead_lettered, result.fired, result.dlq_id, result.offset) == (True, False, "dlq-7", None)
    assert (peek.status, peek.dead_lettered, peek.dlq_id) == ("dead_lettered", True, "dlq-7")


async def test_cancel_without_a_txn_sends_no_query(node, queen):
    node.replies = [(200, {"ok": True, "status": "cancelled", "queue": "q", "timerKey": "k", "txn": "old"}, {})]
    await queen.timer("q").key("k").cancel()
    assert node.seen[0].raw_path == "/api/v1/timers/q/k"


async def test_rows_follows_next_after_until_the_last_page(node, queen):
    pages = {None: {"rows": [{"queue": "q", "timerKey": "a"}, {"queue": "q", "timerKey": "b"}], "truncated": True,
                    "nextAfter": "b"},
             "b": {"rows": [{"queue": "q", "timerKey": "c"}], "truncated": False, "nextAfter": None}}
    node.reply = lambda seen: (200, pages[seen.query.get("after")], {})
    keys = [row.timer_key async for row in queen.timer("q").rows(page_size=2)]
    assert keys == ["a", "b", "c"]
    assert [s.query for s in node.seen] == [{"limit": "2"}, {"limit": "2", "after": "b"}]


async def test_dlq_rows_follows_next_after_until_the_last_page(node, queen):
    row = {"queue": "q", "partition": "Default", "consumerGroup": "g", "offset": 0}
    pages = {None: {"rows": [{**row, "dlqId": "dlq-1"}, {**row, "dlqId": "dlq-4"}], "truncated": True,
                    "nextAfter": "dlq-4"},
             "dlq-4": {"rows": [{**row, "dlqId": "dlq-9"}], "truncated": False, "nextAfter": None}}
    node.reply = lambda seen: (200, pages[seen.query.get("after")], {})
    assert [r.dlq_id async for r in queen.dlq_rows("q", page_size=2)] == ["dlq-1", "dlq-4", "dlq-9"]
    assert [s.query for s in node.seen] == [{"queue": "q", "limit": "2"}, {"queue": "q", "limit": "2", "after": "dlq-4"}]
    page = await queen.dlq_page(limit=2)
    assert ([r.dlq_id for r in page.rows], page.truncated, page.next_after) == (["dlq-1", "dlq-4"], True, "dlq-4")
    assert [r.dlq_id for r in await queen.dlq(after="dlq-4")] == ["dlq-9"]
    assert node.seen[-1].query == {"after": "dlq-4"}


async def test_push_json_and_bytes(node, queen):
    node.replies = [(201, {"results": [{"index": 0, "status": "queued", "queue": "q", "partition": "p",
                                        "transactionId": "t", "messageId": "m", "offset": 4}]}, {})]
    result = await queen.push("q", {"a": [1, 2]}, partition="p", txn="t")
    await queen.push("q", b"\x01\x02")
    json_push, bytes_push = node.seen
    assert json_push.body == {"items": [{"queue": "q", "transactionId": "t", "payload": {"a": [1, 2]}, "partition": "p"}]}
    [item] = bytes_push.body["items"]
    assert item["payloadB64"] == b64(b"\x01\x02") and "payload" not in item and item["transactionId"]
    assert (result.status, result.offset) == ("queued", 4)


async def test_a_push_item_error_raises(node, queen):
    node.replies = [(201, {"results": [{"index": 0, "status": "error", "error": "queue_full"}]}, {})]
    with pytest.raises(PushRefused) as caught:
        await queen.push("q", 1)
    assert caught.value.code == "queue_full"


async def test_pop_query_and_204(node, queen):
    node.replies = [(204, None, {})]
    assert await queen.pop("jobs", group="g", partition="p 1", batch=5, wait="2s") == []
    [seen] = node.seen
    assert seen.raw_path.split("?")[0] == "/api/v1/pop/queue/jobs/partition/p%201"
    assert seen.query == {"consumerGroup": "g", "batch": "5", "wait": "true", "timeout": "2000"}


async def test_extend_body(node, queen):
    node.replies = [(200, {"ok": True, "leaseId": "L", "expiresAt": 77}, {})]
    message = Message.from_wire({"leaseId": "L", "offset": 0, "transactionId": "t", "partition": "Default"},
                                "q", None, queen.transport)
    extension = await message.extend("90s")
    assert (node.seen[0].raw_path, node.seen[0].body) == ("/api/v1/lease/L/extend", {"seconds": 90})
    assert extension.expires_at == 77


async def test_transaction_body_is_one_entry_in_spec_order(node, queen):
    node.replies = [(200, {"success": True, "results": [{}, {}, {}, {}]}, {})]
    message = Message.from_wire({"leaseId": "L", "offset": 3, "transactionId": "m-txn", "partition": "b-1"},
                                "bookings", "bookings", queen.transport)
    await (queen.transaction()
           .ack(message)
           .push("audit", {"event": "held"}, txn="audit-1")
           .kv.put("bookings", "b-1", {"state": "held"}, ttl="7d")
           .timer("bookings").key("b-1").partition("b-1").delay("15m").txn("exp-1")
           .payload({"type": "hold-expired"}).schedule()
           .timer("reminders").key("r-1").cancel()
           .commit())
    assert node.seen[0].raw_path == "/api/v1/transaction"
    assert node.seen[0].body == {
        "operations": [
            {"type": "ack", "leaseId": "L", "queue": "bookings", "partition": "b-1", "transactionId": "m-txn",
             "status": "completed", "consumerGroup": "bookings"},
            {"type": "push", "queue": "audit", "transactionId": "audit-1", "payload": {"event": "held"}},
        ],
        "kv": [{"op": "put", "ns": "bookings", "key": "b-1", "value": {"state": "held"}, "ttlSeconds": 604_800}],
        "timers": [
            {"op": "schedule", "queue": "bookings", "timerKey": "b-1", "delayMs": 900_000, "txn": "exp-1",
             "payload": b64(b'{"type":"hold-expired"}'), "partition": "b-1"},
            {"op": "cancel", "queue": "reminders", "timerKey": "r-1"},
        ],
    }


async def test_transaction_required_leases_are_on_the_wire_and_a_dead_one_is_refused(node, queen):
    node.replies = [(200, {"success": False, "reason": "rejected_ack", "error": "required lease 'L' is not alive"}, {})]
    message = Message.from_wire({"leaseId": "L", "offset": 3, "transactionId": "t", "partition": "Default"},
                                "q", None, queen.transport)
    with pytest.raises(TransactionRefused) as caught:
        await queen.transaction().require_lease(message).require_lease("L2").push("next", 1, txn="n-1").commit()
    assert caught.value.reason == "rejected_ack"
    assert node.seen[0].body == {"operations": [{"type": "push", "queue": "next", "transactionId": "n-1", "payload": 1}],
                                 "requiredLeases": ["L", "L2"]}


async def test_transaction_rollback_raises_with_reason_and_index(node, queen):
    node.replies = [(200, {"success": False, "reason": "kv_precondition", "error": "version 2, expected 1", "index": 1}, {})]
    with pytest.raises(TransactionRefused) as caught:
        await queen.transaction().push("q", 1).kv.check("ns", "k", 1).commit()
    assert (caught.value.reason, caught.value.index, caught.value.status) == ("kv_precondition", 1, 200)


async def test_kv_routes_and_batch_ops(node, queen):
    row = {"ns": "n s", "key": "a/b", "found": True, "value": {"v": 1}, "version": 3, "expiresAt": None}
    node.replies = [(200, row, {})]
    kv = queen.kv("n s")
    assert (await kv.get("a/b")).version == 3
    await kv.put("a/b", {"v": 1}, ttl="1h")
    await kv.put("a/b", [1])
    await kv.delete("a/b")
    node.replies = [(200, {"results": [row]}, {})]
    await kv.incr("c", by=5)
    await kv.check("c", None)
    get, put_ttl, put_forever, delete, incr, check = node.seen
    assert (get.method, get.raw_path) == ("GET", "/api/v1/kv/n%20s/a/b")
    assert (put_ttl.method, put_ttl.body) == ("PUT", {"value": {"v": 1}, "ttlSeconds": 3600})
    assert put_forever.body == {"value": [1], "forever": True}
    assert delete.method == "DELETE"
    assert (incr.raw_path, incr.body) == ("/api/v1/kv", {"ops": [{"op": "incr", "ns": "n s", "key": "c", "by": 5}]})
    assert check.body == {"ops": [{"op": "check", "ns": "n s", "key": "c", "expectedVersion": None}]}


async def test_kv_precondition_is_typed_with_its_index(node, queen):
    node.replies = [(409, {"error": "kv_precondition", "message": "live key", "index": 0}, {})]
    with pytest.raises(PreconditionFailed) as caught:
        await queen.kv("n").put_if_absent("k", 1)
    assert (caught.value.status, caught.value.index) == (409, 0)


async def test_consume_refuses_a_zero_wait_before_polling(node, queen):
    with pytest.raises(ValueError, match="wait"):
        async for _ in queen.consume("q", wait=0):
            break
    assert node.seen == []


async def test_list_and_rows_send_the_prefix(node, queen):
    node.replies = [(200, {"rows": [{"queue": "q", "timerKey": "order/1", "deliverAt": 5}], "truncated": True,
                           "nextAfter": "order/1"}, {}),
                    (200, {"rows": [], "truncated": False, "nextAfter": None}, {})]
    rows = [row.timer_key async for row in queen.timer("q").rows(page_size=1, prefix="order/")]
    first, second = node.seen
    assert rows == ["order/1"]
    assert first.query == {"limit": "1", "prefix": "order/"}
    assert second.query == {"limit": "1", "after": "order/1", "prefix": "order/"}
