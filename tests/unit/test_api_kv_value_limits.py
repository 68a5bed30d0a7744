"""KV values that could not round-trip through an entry, a snapshot and an answer are refused with
400 `bad_request` (and the op's `index` in a batch) before anything is proposed."""

from __future__ import annotations

import pytest

from queen_raft.state.limits import MAX_KV_VALUE_BYTES, MAX_JSON_DEPTH
from test_api_fake_group import ApiHarness


def nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": [value]} if depth % 2 else [value]
    return value


def nested_text(depth: int) -> bytes:
    """A JSON document `depth` arrays deep, written by hand (the client's encoder may refuse it)."""
    return b'{"value": ' + b"[" * depth + b"1" + b"]" * depth + b"}"


TOO_DEEP = nested(MAX_JSON_DEPTH + 1)
TOO_BIG = "x" * (MAX_KV_VALUE_BYTES + 1)


@pytest.mark.parametrize("value", [TOO_DEEP, TOO_BIG], ids=["too deep", "too big"])
@pytest.mark.parametrize("route", ["PUT", "batch", "transaction"])
async def test_an_unstorable_value_is_400_and_nothing_is_proposed(route, value):
    async with ApiHarness() as api:
        if route == "PUT":
            status, _, body = await api.call("PUT", "/api/v1/kv/ns/k", json={"value": value})
        elif route == "batch":
            status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [
                {"op": "put", "ns": "ns", "key": "ok", "value": 1}, {"op": "put", "ns": "ns", "key": "k", "value": value}]})
            assert body["index"] == 1
        else:
            status, _, body = await api.call("POST", "/api/v1/transaction", json={"kv": [
                {"op": "putIfAbsent", "ns": "ns", "key": "k", "value": value}]})
            assert (body["index"], body["reason"]) == (0, "bad_request")
        assert (status, body["error"]) == (400, "bad_request"), body
        assert api.groups["acme"].writes() == []


async def test_a_value_1021_levels_deep_is_400_and_reads_keep_working():
    async with ApiHarness() as api:
        status, _, body = await api.call("PUT", "/api/v1/kv/ns/k", data=nested_text(1021))
        assert (status, body["error"]) == (400, "bad_request"), body
        status, _, body = await api.call("GET", "/api/v1/kv/ns/k")
        assert (status, body["found"]) == (200, False)
        api.groups["acme"].state.snapshot()


async def test_a_value_at_the_depth_bound_is_stored_and_read_back():
    async with ApiHarness() as api:
        value = nested(MAX_JSON_DEPTH)
        status, _, body = await api.call("PUT", "/api/v1/kv/ns/k", json={"value": value})
        assert status == 200 and body["value"] == value
        status, _, body = await api.call("GET", "/api/v1/kv/ns/k")
        assert status == 200 and body["value"] == value
