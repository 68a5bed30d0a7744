"""An answer carries at most MAX_ANSWER_BYTES of stored payloads and values, however small the
request: a batch of reads of one large value, a fetch of many records, a pop batch, a DLQ page.
Reads that cannot be cut short (a KV batch, a transaction, a fetch) answer 413 answer_too_large and
change nothing; a pop takes fewer messages, a DLQ page ends early (truncated, nextAfter). An answer
always carries at least one item, so nothing is ever out of reach."""

from __future__ import annotations

import base64

from queen_raft.state.limits import MAX_ANSWER_BYTES
from test_api_fake_group import ApiHarness

VALUE = "v" * 1_000_000  # ~1 MB stored: 16 fit the bound, 17 do not
FIT = MAX_ANSWER_BYTES // 1_000_005
PAYLOAD_B64 = base64.b64encode(b"p" * 1_000_000).decode()  # not JSON: answered as payloadB64


def gets(n: int) -> list[dict]:
    return [{"op": "get", "ns": "big", "key": "k"} for _ in range(n)]


async def put_big(api: ApiHarness) -> None:
    status, _, _ = await api.call("PUT", "/api/v1/kv/big/k", json={"value": VALUE})
    assert status == 200


async def test_a_read_only_batch_of_gets_over_the_bound_is_413_and_within_it_200():
    assert FIT == 16
    async with ApiHarness() as api:
        await put_big(api)
        status, _, body = await api.call("POST", "/api/v1/kv", token="acme-ro", json={"ops": gets(300)})
        assert (status, body["error"]) == (413, "answer_too_large"), str(body)[:300]
        assert str(MAX_ANSWER_BYTES) in body["message"] and body["index"] == FIT
        status, _, body = await api.call("POST", "/api/v1/kv", token="acme-ro", json={"ops": gets(FIT)})
        assert status == 200 and len(body["results"]) == FIT


async def test_a_batch_with_a_write_over_the_bound_is_413_and_the_write_is_not_applied():
    async with ApiHarness() as api:
        await put_big(api)
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [
            {"op": "put", "ns": "small", "key": "x", "value": 1}, *gets(FIT + 1)]})
        assert (status, body["error"]) == (413, "answer_too_large"), str(body)[:300]
        status, _, body = await api.call("GET", "/api/v1/kv/small/x")
        assert body["found"] is False


async def test_a_transaction_over_the_bound_is_413_with_its_reason():
    async with ApiHarness() as api:
        await put_big(api)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"kv": [
            {"op": "put", "ns": "small", "key": "x", "value": 1}, *gets(FIT + 1)]})
        assert (status, body["success"], body["reason"]) == (413, False, "answer_too_large"), str(body)[:300]
        _, _, body = await api.call("GET", "/api/v1/kv/small/x")
        assert body["found"] is False


async def push_big(api: ApiHarness, count: int) -> None:
    for start in range(0, count, 4):
        status, _, _ = await api.call("POST", "/api/v1/push", json={"items": [
            {"queue": "q", "payloadB64": PAYLOAD_B64} for _ in range(min(4, count - start))]})
        assert status == 201


async def test_a_pop_batch_takes_only_the_messages_within_the_bound():
    async with ApiHarness() as api:
        await push_big(api, FIT + 4)
        status, _, popped = await api.call("GET", "/api/v1/pop/queue/q?batch=1000")
        assert status == 200 and len(popped["messages"]) == FIT
        status, _, rest = await api.call("GET", "/api/v1/pop/queue/q?batch=1000&consumerGroup=other")
        assert len(rest["messages"]) == FIT  # another group starts from the beginning
        acks = [{"offset": m["offset"], "status": "completed"} for m in popped["messages"]]
        status, _, _ = await api.call("POST", "/api/v1/ack/batch", json={"leaseId": popped["leaseId"], "acknowledgments": acks})
        assert status == 200
        status, _, popped = await api.call("GET", "/api/v1/pop/queue/q?batch=1000")
        assert [m["offset"] for m in popped["messages"]] == list(range(FIT, FIT + 4))


async def test_a_fetch_over_the_bound_is_413_and_a_smaller_one_answers():
    async with ApiHarness() as api:
        await push_big(api, FIT + 1)
        status, _, body = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={
            "entries": [{"queue": "q", "limit": 1000}] * 64})
        assert (status, body["error"]) == (413, "answer_too_large"), str(body)[:300]
        status, _, body = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={
            "entries": [{"queue": "q", "limit": FIT}]})
        assert status == 200 and len(body["entries"][0]["records"]) == FIT


async def test_a_dlq_page_ends_at_the_bound_and_the_next_page_has_the_rest():
    async with ApiHarness() as api:
        await push_big(api, FIT + 2)
        _, _, popped = await api.call("GET", "/api/v1/pop/queue/q?batch=1000")
        while popped is not None:
            acks = [{"offset": m["offset"], "status": "dlq", "error": "poison"} for m in popped["messages"]]
            status, _, _ = await api.call("POST", "/api/v1/ack/batch", json={"leaseId": popped["leaseId"], "acknowledgments": acks})
            assert status == 200
            _, _, popped = await api.call("GET", "/api/v1/pop/queue/q?batch=1000")
        status, _, page = await api.call("GET", "/api/v1/dlq?queue=q&limit=1000", token="acme-ro")
        assert status == 200 and len(page["rows"]) == FIT and page["truncated"] is True
        assert page["nextAfter"] == page["rows"][-1]["dlqId"]
        _, _, rest = await api.call("GET", f"/api/v1/dlq?queue=q&limit=1000&after={page['nextAfter']}", token="acme-ro")
        assert len(rest["rows"]) == 2 and rest["truncated"] is False


def test_the_sdk_raises_answer_too_large_a_payload_too_large():
    from queen_raft.client import AnswerTooLarge, PayloadTooLarge
    from queen_raft.client.errors import error_from_response

    error = error_from_response(413, {"error": "answer_too_large", "message": "over", "index": 16}, {})
    assert isinstance(error, AnswerTooLarge) and isinstance(error, PayloadTooLarge)
    assert type(error_from_response(413, {"error": "payload_too_large", "message": "big"}, {})) is PayloadTooLarge
