"""A transaction's cancel with requirePending over the real app, and the OpenAPI document's names
and types that client generators need."""

from __future__ import annotations

from queen_raft.api.openapi import document
from queen_raft.api.openapi_names import OPERATION_IDS

from test_api_fake_group import ApiHarness
from test_api_transaction import digest, timer


async def test_a_required_cancel_of_an_absent_timer_rolls_back_the_kv_write():
    async with ApiHarness() as api:
        before = digest(api)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "kv": [{"op": "put", "ns": "orders", "key": "o1", "value": {"state": "paid"}}],
            "timers": [{"op": "cancel", "queue": "bookings", "timerKey": "o1", "requirePending": True}],
        })
        assert status == 200
        assert body["success"] is False and body["reason"] == "timer_not_pending" and body["index"] == 1
        assert digest(api) == before


async def test_a_required_cancel_of_a_pending_timer_commits():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json={"operations": [timer("o1")]})
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [{"op": "cancel", "queue": "bookings", "timerKey": "o1", "requirePending": True}]})
        assert status == 200 and body["success"] is True
        assert body["results"][0]["status"] == "cancelled"


async def test_require_pending_is_refused_on_the_standalone_route_and_must_be_boolean():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json={"operations": [
            {"op": "cancel", "queue": "bookings", "timerKey": "o1", "requirePending": True}]})
        assert status == 400 and body["error"] == "timers_bad_request"
        assert "requirePending" in body["message"]
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [{"op": "cancel", "queue": "bookings", "timerKey": "o1", "requirePending": "yes"}]})
        assert status == 400 and "requirePending must be true or false" in body["message"]


def _walk(node, found):
    if isinstance(node, dict):
        if ("const" in node or "enum" in node) and "type" not in node:
            found.append(node)
        for value in node.values():
            _walk(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk(value, found)
    return found


def test_every_operation_has_a_unique_operation_id():
    ids = [op.get("operationId") for methods in document()["paths"].values() for op in methods.values()]
    assert None not in ids
    assert len(set(ids)) == len(ids) == len(OPERATION_IDS)


def test_every_const_and_enum_has_a_type():
    doc = document()
    assert _walk(doc, []) == []
    assert doc["components"]["schemas"]["Error"]["properties"]["success"]["type"] == "boolean"


def test_the_document_cites_no_file():
    assert ".md" not in document()["info"]["description"]


async def test_the_served_document_names_the_node_it_was_fetched_from():
    async with ApiHarness() as api:
        status, _, body = await api.call("GET", "/api/v1/openapi.json")
        assert status == 200
        assert body["servers"][0]["url"].startswith("http://127.0.0.1:")
