"""Every 503 carries a machine-readable `reason` beside error and message, as documented."""

from __future__ import annotations

import base64

import pytest

from queen_raft.api.errors import RAFT_UNAVAILABLE_REASONS, UNAVAILABLE_REASONS, ApiError
from queen_raft.api.openapi import document
from queen_raft.raft import GroupUnavailable
from queen_raft.raft import errors as raft_errors
from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b'{"n": 1}').decode()


def schedule(key: str = "k", queue: str = "orders") -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 60_000, "txn": f"t-{key}", "payload": PAYLOAD}


def test_the_reasons_are_the_raft_layers_and_the_apis_own():
    # Every reason the Raft layer can raise (each has its Retry-After) is a documented one.
    raised = set(raft_errors._RETRY_AFTER_BY_REASON) | set(raft_errors._REASON_BY_FAIL.values())
    assert raised == set(RAFT_UNAVAILABLE_REASONS)
    assert set(UNAVAILABLE_REASONS) - set(RAFT_UNAVAILABLE_REASONS) == {"paused", "no_encryption_key"}


def test_a_503_without_a_known_reason_cannot_be_built():
    with pytest.raises(ValueError, match="needs a reason"):
        ApiError(503, "unavailable", "no reason")
    with pytest.raises(ValueError, match="needs a reason"):
        ApiError(503, "unavailable", "made up", fields={"reason": "sunspots"})


@pytest.mark.parametrize("reason", RAFT_UNAVAILABLE_REASONS)
async def test_group_unavailable_answers_its_reason_on_writes_reads_and_transactions(reason):
    async with ApiHarness() as api:
        api.groups["acme"].unavailable = GroupUnavailable(reason)
        calls = [
            ("POST", "/api/v1/timers", [schedule()], "timers_unavailable"),
            ("GET", "/api/v1/timers/orders/k", None, "timers_unavailable"),
            ("DELETE", "/api/v1/timers/orders/k", None, "timers_unavailable"),
            ("POST", "/api/v1/push", {"items": [{"queue": "orders", "payload": 1}]}, "unavailable"),
            ("POST", "/api/v1/transaction", {"timers": [schedule()]}, "unavailable"),
            ("GET", "/api/v1/kv/ns/key", None, "unavailable"),
        ]
        for method, path, body, code in calls:
            status, headers, answer = await api.call(method, path, json=body)
            assert (status, answer["error"], answer["reason"]) == (503, code, reason), (method, path, answer)
            assert "Retry-After" in headers and answer["message"]


async def test_paused_scheduling_answers_reason_paused_on_the_timer_route_and_in_a_transaction():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule()])
        assert (status, body["error"], body["reason"]) == (503, "timers_disabled", "paused")
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"timers": [schedule()]})
        assert (status, body["error"], body["reason"], body["success"]) == (503, "timers_disabled", "paused", False)


async def test_a_node_without_the_key_answers_reason_no_encryption_key():
    async with ApiHarness() as api:
        api.groups["acme"]._apply({"op": "configure", "queue": "secret", "options": {"encryptionEnabled": True},
                                   "mode": "merge"})
        status, _, body = await api.call("POST", "/api/v1/push", json={"items": [{"queue": "secret", "payload": 1}]})
        assert (status, body["error"], body["reason"]) == (503, "encryption_unavailable", "no_encryption_key")


def test_every_documented_503_requires_a_reason_from_the_closed_list():
    spec = document()
    unavailable = spec["components"]["schemas"]["Unavailable"]
    assert unavailable["properties"]["reason"]["enum"] == list(UNAVAILABLE_REASONS)
    assert "reason" in unavailable["required"]
    documented = [(path, method, op["responses"]["503"]) for path, methods in spec["paths"].items()
                  for method, op in methods.items() if "503" in op["responses"]]
    assert len(documented) > 20
    for path, method, answer in documented:
        if path == "/health":  # not an error: the health body, status settling
            continue
        schema = answer["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Unavailable"}, (path, method)
