"""KV: versions, TTL on the group clock, preconditions, all-or-nothing batches."""

from __future__ import annotations

import pytest

from queen_raft.state import TenantState

T0 = 1_700_000_000_000


def kv(state: TenantState, now: int, *ops: dict) -> dict:
    return state.apply({"op": "kv", "now": now, "ops": list(ops)})


def op(kind: str, key: str = "k", ns: str = "ns", **extra) -> dict:
    return {"op": kind, "ns": ns, "key": key, **extra}


def test_put_get_versions_start_at_1_and_grow_by_one_per_write():
    state = TenantState()
    first = kv(state, T0, op("put", value={"a": 1}))["results"][0]
    assert first == {"ns": "ns", "key": "k", "found": True, "value": {"a": 1}, "version": 1,
                     "expiresAt": None}
    kv(state, T0, op("put", value=2))
    assert kv(state, T0, op("incr", by=5))["results"][0]["value"] == 7
    assert state.kv_get("ns", "k") == {"ns": "ns", "key": "k", "found": True, "value": 7,
                                       "version": 3, "expiresAt": None}
    assert kv(state, T0, op("get"))["results"][0]["version"] == 3


def test_get_of_a_missing_key_is_not_found():
    state = TenantState()
    assert kv(state, T0, op("get", "nope"))["results"][0] == {
        "ns": "ns", "key": "nope", "found": False, "value": None, "version": None,
        "expiresAt": None}
    assert state.kv_get("ns", "nope") is None


def test_delete_then_put_restarts_the_version_at_1():
    state = TenantState()
    kv(state, T0, op("put", value=1), op("put", value=2))
    assert kv(state, T0, op("delete"))["results"][0]["found"] is True
    assert kv(state, T0, op("delete"))["results"][0]["found"] is False
    assert kv(state, T0, op("put", value=3))["results"][0]["version"] == 1


def test_ttl_expires_on_the_group_clock_and_the_entry_is_pruned():
    state = TenantState()
    assert kv(state, T0, op("put", value="v", ttlSeconds=2))["results"][0]["expiresAt"] == T0 + 2000
    state.apply({"op": "barrier", "now": T0 + 1999})
    assert state.kv_get("ns", "k")["value"] == "v"
    state.apply({"op": "barrier", "now": T0 + 2000})
    assert state.kv_get("ns", "k") is None
    kv(state, T0 + 5000, op("put", "other", value=1))
    assert ("ns", "k") not in state.kv.entries
    assert len(state.kv.expiry) == 0
    assert kv(state, T0 + 5000, op("putIfAbsent", value="w"))["results"][0]["version"] == 1


def test_a_stale_expiry_does_not_drop_a_key_written_again_without_ttl():
    state = TenantState()
    kv(state, T0, op("put", value="v", ttlSeconds=1))
    kv(state, T0, op("put", value="kept"))
    kv(state, T0 + 5000, op("put", "other", value=1))
    assert state.kv_get("ns", "k")["value"] == "kept"


def test_put_without_ttl_clears_the_expiry_and_incr_keeps_it():
    state = TenantState()
    kv(state, T0, op("put", value=1, ttlSeconds=5))
    assert kv(state, T0, op("incr"))["results"][0]["expiresAt"] == T0 + 5000
    assert kv(state, T0, op("put", value=1))["results"][0]["expiresAt"] is None
    state.apply({"op": "barrier", "now": T0 + 10_000})
    assert state.kv_get("ns", "k")["value"] == 1


def test_incr_of_an_absent_key_starts_at_zero_and_refuses_a_non_integer():
    state = TenantState()
    assert kv(state, T0, op("incr"))["results"][0]["value"] == 1
    kv(state, T0, op("put", "s", value="text"))
    answer = kv(state, T0, op("incr", "k"), op("incr", "s"))
    assert (answer["error"], answer["index"]) == ("bad_request", 1)
    assert state.kv_get("ns", "k")["value"] == 1


def test_put_if_absent_on_a_live_key_refuses_the_batch_and_changes_nothing():
    state = TenantState()
    kv(state, T0, op("put", "a", value=1))
    before = state.snapshot()
    answer = kv(state, T0, op("put", "b", value=2), op("putIfAbsent", "a", value=9))
    assert (answer["error"], answer["index"]) == ("kv_precondition", 1)
    assert state.snapshot() == before
    assert state.kv_get("ns", "b") is None


@pytest.mark.parametrize("expected,passes", [(2, True), (1, False), (None, False)])
def test_check_compares_the_live_version(expected, passes):
    state = TenantState()
    kv(state, T0, op("put", value=1), op("put", value=2))
    answer = kv(state, T0, op("check", expectedVersion=expected), op("put", value=3))
    if passes:
        assert answer["results"][1]["version"] == 3
    else:
        assert (answer["error"], answer["index"]) == ("kv_precondition", 0)
        assert state.kv_get("ns", "k")["version"] == 2


def test_check_with_no_expected_version_asserts_absence():
    state = TenantState()
    assert "results" in kv(state, T0, op("check", "missing", expectedVersion=None))


def test_ops_in_a_batch_see_the_earlier_ops():
    state = TenantState()
    answer = kv(state, T0, op("putIfAbsent", value=1), op("check", expectedVersion=1),
                op("incr", by=2), op("delete"), op("check", expectedVersion=None))
    assert [r["found"] for r in answer["results"]] == [True, True, True, True, False]
    assert state.kv_get("ns", "k") is None


def test_namespaces_are_separate():
    state = TenantState()
    kv(state, T0, op("put", ns="a", value=1), op("put", ns="b", value=2))
    assert (state.kv_get("a", "k")["value"], state.kv_get("b", "k")["value"]) == (1, 2)


@pytest.mark.parametrize("bad", [
    {"op": "frobnicate", "ns": "n", "key": "k"},
    {"op": "put", "ns": 1, "key": "k"},
    {"op": "put", "ns": "n", "key": "k", "ttlSeconds": 0},
    {"op": "incr", "ns": "n", "key": "k", "by": "1"},
    {"op": "check", "ns": "n", "key": "k", "expectedVersion": "1"},
])
def test_malformed_ops_are_refused(bad):
    state = TenantState()
    answer = kv(state, T0, op("put", value=1), bad)
    assert (answer["error"], answer["index"]) == ("bad_request", 1)
    assert state.kv_get("ns", "k") is None
