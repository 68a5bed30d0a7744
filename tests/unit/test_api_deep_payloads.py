"""A message whose payload is JSON nested too deep to answer as JSON is answered as `payloadB64`
(the rule for a payload that is not JSON), by pop and fetch, whether it was pushed or fired by a
timer: one such message never makes its partition answer 500."""

from __future__ import annotations

import base64

import pytest

from queen_raft.state.limits import MAX_JSON_DEPTH
from test_api_fake_group import ApiHarness


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# 5000 levels: the stdlib decoder runs out of recursion. 990: it decodes, and no encoder writes it
# back inside an answer. Just past the bound: decodes and encodes, but is not answered as JSON.
DEEP_PAYLOADS = {"5000 levels": deep_json(5000), "990 levels": deep_json(990),
                 "bound + 1": deep_json(MAX_JSON_DEPTH + 1)}


async def pop_one(api: ApiHarness) -> tuple[int, dict]:
    status, _, body = await api.call("GET", "/api/v1/pop/queue/q?batch=1")
    return status, body


async def ack(api: ApiHarness, popped: dict) -> None:
    message = popped["messages"][0]
    status, _, body = await api.call("POST", "/api/v1/ack", json={
        "leaseId": popped["leaseId"], "offset": message["offset"], "status": "completed"})
    assert status == 200 and body["results"][0]["success"] is True


@pytest.mark.parametrize("name", sorted(DEEP_PAYLOADS))
async def test_a_pushed_deep_payload_pops_and_fetches_as_payload_b64_and_the_partition_moves_on(name):
    payload = DEEP_PAYLOADS[name]
    async with ApiHarness() as api:
        status, _, _ = await api.call("POST", "/api/v1/push", token="acme-wo", json={"items": [
            {"queue": "q", "payloadB64": b64(payload)}, {"queue": "q", "payload": {"next": 1}}]})
        assert status == 201
        status, popped = await pop_one(api)
        assert status == 200, popped
        assert popped["messages"][0]["payloadB64"] == b64(payload) and "payload" not in popped["messages"][0]
        await ack(api, popped)
        status, popped = await pop_one(api)
        assert (status, popped["messages"][0]["payload"]) == (200, {"next": 1})
        status, _, fetched = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={"entries": [{"queue": "q"}]})
        assert status == 200, fetched
        records = fetched["entries"][0]["records"]
        assert records[0]["payloadB64"] == b64(payload) and records[1]["payload"] == {"next": 1}


async def test_a_timer_firing_a_deep_payload_pops_as_payload_b64():
    async with ApiHarness() as api:
        status, _, _ = await api.call("POST", "/api/v1/timers", token="acme-wo", json=[{
            "op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 100, "txn": "t", "payload": b64(deep_json(5000))}])
        assert status == 200
        api.groups["acme"].advance(100)
        status, popped = await pop_one(api)
        assert status == 200, popped
        assert popped["messages"][0]["payloadB64"] == b64(deep_json(5000))


async def test_a_payload_at_the_bound_is_still_answered_as_json():
    value: object = 1
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/push", json={"items": [{"queue": "q", "payload": value}]})
        status, popped = await pop_one(api)
        assert status == 200 and popped["messages"][0]["payload"] == value


async def test_a_json_payload_pushed_deeper_than_the_bound_is_400():
    value: object = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        value = {"k": value}
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/push", json={"items": [{"queue": "q", "payload": value}]})
        assert (status, body["error"]) == (400, "bad_request"), body
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "push", "queue": "q", "payload": value}]})
        assert (status, body["reason"], body["index"]) == (400, "bad_request", 0), body
        assert api.groups["acme"].writes() == []
