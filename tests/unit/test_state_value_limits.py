"""Values the state refuses because they could not round-trip through an entry, a snapshot and an
answer: a KV value nested past MAX_JSON_DEPTH or larger than MAX_KV_VALUE_BYTES. The refusal is
the state's own (deterministic, every replica alike), so an entry already in a journal from before
the API checked them cannot make a replica's snapshot fail."""

from __future__ import annotations

import msgpack
import pytest

from queen_raft.state import TenantState
from queen_raft.state.limits import MAX_KV_VALUE_BYTES, MAX_JSON_DEPTH
from queen_raft.state.values import kv_value_problem, nesting_depth

NOW = 1_000


def nested(depth: int, kind: str = "list") -> object:
    value: object = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def put(value: object, key: str = "k") -> dict:
    return {"op": "put", "ns": "ns", "key": key, "value": value, "ttlSeconds": None}


def test_nesting_depth_counts_container_levels_without_recursion():
    assert nesting_depth(1) == 0 and nesting_depth("s") == 0 and nesting_depth([]) == 1
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(nested(50_000)) == 50_000  # no RecursionError however deep


@pytest.mark.parametrize("kind", ["list", "map"])
def test_the_depth_bound_is_inclusive(kind):
    assert kv_value_problem(nested(MAX_JSON_DEPTH, kind)) is None
    assert "nests" in kv_value_problem(nested(MAX_JSON_DEPTH + 1, kind))


def test_the_size_bound_counts_the_stored_msgpack_bytes():
    overhead = len(msgpack.packb("x" * 100_000)) - 100_000
    assert kv_value_problem("x" * (MAX_KV_VALUE_BYTES - overhead)) is None
    assert "bytes" in kv_value_problem("x" * (MAX_KV_VALUE_BYTES - overhead + 1))


@pytest.mark.parametrize("command_of", [
    lambda value: {"op": "kv", "ops": [put(value)]},
    lambda value: {"op": "transaction", "kv": [put(value)]},
], ids=["kv", "transaction"])
@pytest.mark.parametrize("value", [nested(MAX_JSON_DEPTH + 1), nested(1021), "x" * (MAX_KV_VALUE_BYTES + 1)],
                         ids=["depth bound + 1", "1021 levels", "over the size bound"])
def test_apply_refuses_an_unstorable_value_and_every_snapshot_still_works(command_of, value):
    state = TenantState()
    state.apply({"op": "kv", "now": NOW, "ops": [put("fine", "other")]})
    before = state.snapshot()
    answer = state.apply({**command_of(value), "now": NOW})
    assert answer.get("reason", answer.get("error")) == "bad_request", answer
    assert answer.get("index", 0) == 0
    assert state.kv_get("ns", "k") is None
    assert state.snapshot() == before  # nothing changed, and the snapshot can still be written
    assert TenantState.restore(state.snapshot()).kv_get("ns", "other")["value"] == "fine"


def test_a_value_at_the_bounds_is_stored_snapshotted_and_restored():
    state = TenantState()
    value = nested(MAX_JSON_DEPTH, "map")
    answer = state.apply({"op": "kv", "now": NOW, "ops": [put(value)]})
    assert answer["results"][0]["version"] == 1
    assert TenantState.restore(state.snapshot()).kv_get("ns", "k")["value"] == value
