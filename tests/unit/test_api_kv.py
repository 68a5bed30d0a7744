"""KV routes over a real app and a real TenantState: one key by path, batches, versions, expiry, levels."""

from __future__ import annotations

import pytest

from test_api_fake_group import START_MS, ApiHarness


async def test_put_get_delete_versions_and_absent_is_found_false():
    async with ApiHarness() as api:
        status, _, row = await api.call("GET", "/api/v1/kv/carts/u/1", token="acme-ro")
        assert (status, row["found"], row["version"]) == (200, False, None)
        _, _, row = await api.call("PUT", "/api/v1/kv/carts/u/1", json={"value": {"items": [1]}})
        assert (row["found"], row["version"], row["expiresAt"], row["key"]) == (True, 1, None, "u/1")
        _, _, row = await api.call("PUT", "/api/v1/kv/carts/u/1", json={"value": {"items": [1, 2]}})
        assert row["version"] == 2
        status, _, row = await api.call("GET", "/api/v1/kv/carts/u/1", token="acme-ro")
        assert (status, row["value"], row["version"]) == (200, {"items": [1, 2]}, 2)
        _, _, row = await api.call("DELETE", "/api/v1/kv/carts/u/1")
        assert row["found"] is True
        _, _, row = await api.call("DELETE", "/api/v1/kv/carts/u/1")
        assert row["found"] is False
        _, _, row = await api.call("GET", "/api/v1/kv/carts/u/1", token="acme-ro")
        assert row["found"] is False


async def test_ttl_expires_on_the_group_clock_and_forever_clears_it():
    async with ApiHarness() as api:
        _, _, row = await api.call("PUT", "/api/v1/kv/s/k", json={"value": 1, "ttlSeconds": 10})
        group = api.groups["acme"]
        assert row["expiresAt"] == group.state.clock + 10_000
        group.now_ms += 9_999
        _, _, row = await api.call("GET", "/api/v1/kv/s/k", token="acme-ro")
        assert row["found"] is True
        _, _, row = await api.call("PUT", "/api/v1/kv/s/k", json={"value": 2, "forever": True})
        assert row["expiresAt"] is None
        group.now_ms += 60_000
        _, _, row = await api.call("GET", "/api/v1/kv/s/k", token="acme-ro")
        assert (row["found"], row["value"]) == (True, 2)
        await api.call("PUT", "/api/v1/kv/s/short", json={"value": 1, "ttlSeconds": 1})
        group.now_ms += 1_000
        _, _, row = await api.call("GET", "/api/v1/kv/s/short", token="acme-ro")
        assert row["found"] is False


async def test_batch_all_ops_and_precondition_refuses_whole_batch_with_index():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [
            {"op": "put", "ns": "n", "key": "a", "value": "x"},
            {"op": "putIfAbsent", "ns": "n", "key": "b", "value": 1},
            {"op": "incr", "ns": "n", "key": "b", "by": 4},
            {"op": "incr", "ns": "n", "key": "c"},
            {"op": "check", "ns": "n", "key": "a", "expectedVersion": 1},
            {"op": "get", "ns": "n", "key": "b"},
            {"op": "delete", "ns": "n", "key": "c"},
        ]})
        assert status == 200
        rows = body["results"]
        assert [r["value"] for r in rows[:4]] == ["x", 1, 5, 1]
        assert rows[5]["version"] == 2 and rows[6]["found"] is True
        before = api.groups["acme"].state.kv_get("n", "b")
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [
            {"op": "put", "ns": "n", "key": "b", "value": 99},
            {"op": "check", "ns": "n", "key": "a", "expectedVersion": 7},
        ]})
        assert (status, body["error"], body["index"]) == (409, "kv_precondition", 1)
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [
            {"op": "put", "ns": "n", "key": "z", "value": 1},
            {"op": "putIfAbsent", "ns": "n", "key": "a", "value": 1},
        ]})
        assert (status, body["error"], body["index"]) == (409, "kv_precondition", 1)
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [{"op": "incr", "ns": "n", "key": "a"}]})
        assert (status, body["error"], body["index"]) == (400, "bad_request", 0)
        state = api.groups["acme"].state
        assert state.kv_get("n", "b") == before and state.kv_get("n", "z") is None
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [{"op": "check", "ns": "n", "key": "nope",
                                                                             "expectedVersion": None}]})
        assert status == 200


BAD_KV = {
    "not an object": [],
    "no ops": {},
    "empty ops": {"ops": []},
    "unknown top-level": {"ops": [{"op": "get", "ns": "n", "key": "k"}], "x": 1},
    "unknown op": {"ops": [{"op": "upsert", "ns": "n", "key": "k"}]},
    "op an object": {"ops": [{"op": {}, "ns": "n", "key": "k"}]},
    "op a list": {"ops": [{"op": [], "ns": "n", "key": "k"}]},
    "empty ns": {"ops": [{"op": "get", "ns": "", "key": "k"}]},
    "key not a string": {"ops": [{"op": "get", "ns": "n", "key": 1}]},
    "put without value": {"ops": [{"op": "put", "ns": "n", "key": "k"}]},
    "ttl zero": {"ops": [{"op": "put", "ns": "n", "key": "k", "value": 1, "ttlSeconds": 0}]},
    "ttl and forever": {"ops": [{"op": "put", "ns": "n", "key": "k", "value": 1, "ttlSeconds": 5, "forever": True}]},
    "ttl on get": {"ops": [{"op": "get", "ns": "n", "key": "k", "ttlSeconds": 5}]},
    "by a float": {"ops": [{"op": "incr", "ns": "n", "key": "k", "by": 1.5}]},
    "value past 2^53": {"ops": [{"op": "put", "ns": "n", "key": "k", "value": {"a": [2**64]}}]},
    "expectedVersion a string": {"ops": [{"op": "check", "ns": "n", "key": "k", "expectedVersion": "1"}]},
    "too many": {"ops": [{"op": "get", "ns": "n", "key": str(i)} for i in range(1001)]},
    "key too long": {"ops": [{"op": "get", "ns": "n", "key": "k" * 1025}]},
}


@pytest.mark.parametrize("case", sorted(BAD_KV))
async def test_bad_kv_batch_is_400_and_proposes_nothing(case):
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/kv", json=BAD_KV[case])
        assert (status, body["error"]) == (400, "bad_request")
        assert api.groups["acme"].writes() == []


async def test_bad_put_bodies_are_400():
    async with ApiHarness() as api:
        for body in ([1], {"ttlSeconds": 5}, {"value": 1, "by": 2}, {"value": 1, "forever": "yes"}):
            status, _, answer = await api.call("PUT", "/api/v1/kv/n/k", json=body)
            assert (status, answer["error"]) == (400, "bad_request"), body
        assert api.groups["acme"].writes() == []


async def test_levels_read_only_reads_write_only_nothing():
    async with ApiHarness() as api:
        assert (await api.call("PUT", "/api/v1/kv/n/k", token="acme-ro", json={"value": 1}))[0] == 403
        assert (await api.call("DELETE", "/api/v1/kv/n/k", token="acme-ro"))[0] == 403
        assert (await api.call("GET", "/api/v1/kv/n/k", token="acme-wo"))[0] == 403
        assert (await api.call("PUT", "/api/v1/kv/n/k", token="acme-wo", json={"value": 1}))[0] == 403
        assert (await api.call("POST", "/api/v1/kv", token="acme-ro", json={"ops": [
            {"op": "put", "ns": "n", "key": "k", "value": 1}]}))[0] == 403
        assert (await api.call("POST", "/api/v1/kv", token="acme-ro", json={"ops": [
            {"op": "get", "ns": "n", "key": "k"}]}))[0] == 200
        assert (await api.call("GET", "/api/v1/kv/n/k", token=None))[0] == 401
        assert (await api.call("PUT", "/api/v1/kv/n/k", token="acme-admin", json={"value": 1}))[0] == 200


async def test_tenants_do_not_share_keys():
    async with ApiHarness() as api:
        await api.call("PUT", "/api/v1/kv/n/k", json={"value": "acme"})
        _, _, row = await api.call("GET", "/api/v1/kv/n/k", token="globex-ro")
        assert row["found"] is False


async def test_kv_get_goes_through_the_read_barrier():
    async with ApiHarness() as api:
        assert api.groups["acme"].state.clock == 0
        await api.call("GET", "/api/v1/kv/n/k", token="acme-ro")
        # The barrier entry moved the group clock; a local read would have left it at 0.
        assert api.groups["acme"].state.clock == START_MS


async def test_keys_with_a_newline_or_slashes_are_reachable_by_path():
    """Found by the fuzz run: the catch-all did not match a newline, so such a key (which a body
    can create) could not be read or deleted by path."""
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/kv", json={"ops": [{"op": "put", "ns": "n", "key": "a\nb/c", "value": 1}]})
        status, _, row = await api.call("GET", "/api/v1/kv/n/a%0Ab/c", token="acme-ro")
        assert (status, row["found"], row["key"]) == (200, True, "a\nb/c")
        await api.call("POST", "/api/v1/timers", json=[{"op": "schedule", "queue": "q", "timerKey": "t\n1", "delayMs": 5000,
                                                        "txn": "t", "payload": "AA=="}])
        status, _, answer = await api.call("DELETE", "/api/v1/timers/q/t%0A1")
        assert (status, answer["status"]) == (200, "cancelled")
