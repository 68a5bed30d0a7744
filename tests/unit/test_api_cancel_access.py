"""A write-only token may schedule, and is refused every cancel: DELETE, a transaction's cancel and
a cancel inside `POST /api/v1/timers` alike (docs/spec.md section 2: a batch holding a cancel needs
read-write)."""

from __future__ import annotations

import base64

import pytest

from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b'{"hi":1}').decode()


def schedule(key: str, **fields) -> dict:
    return {"op": "schedule", "queue": "q", "timerKey": key, "delayMs": 60_000, "txn": f"t-{key}",
            "payload": PAYLOAD, **fields}


def cancel(key: str, **fields) -> dict:
    return {"op": "cancel", "queue": "q", "timerKey": key, **fields}


CANCEL_CALLS = {
    "POST /timers, a cancel alone": ("POST", "/api/v1/timers", {"operations": [cancel("victim")]}),
    "POST /timers, a bare array": ("POST", "/api/v1/timers", [cancel("victim", txn="mine")]),
    "POST /timers, a cancel after a schedule": ("POST", "/api/v1/timers", [schedule("new"), cancel("victim")]),
    "POST /timers, a cancel of an absent key": ("POST", "/api/v1/timers", [cancel("never-scheduled")]),
    "DELETE": ("DELETE", "/api/v1/timers/q/victim", None),
    "transaction": ("POST", "/api/v1/transaction", {"timers": [cancel("victim")]}),
}


@pytest.mark.parametrize("case", sorted(CANCEL_CALLS))
async def test_a_write_only_token_cannot_cancel_on_any_path(case):
    method, path, body = CANCEL_CALLS[case]
    async with ApiHarness() as api:
        status, _, _ = await api.call("POST", "/api/v1/timers", token="acme-rw", json=[schedule("victim", txn="secret")])
        assert status == 200
        writes_before = len(api.groups["acme"].writes())
        status, _, answer = await api.call(method, path, token="acme-wo", json=body)
        assert (status, answer["error"]) == (403, "forbidden"), answer
        assert "secret" not in str(answer)
        assert len(api.groups["acme"].writes()) == writes_before  # nothing proposed: "new" is not scheduled either
        _, _, peek = await api.call("GET", "/api/v1/timers/q/victim", token="acme-ro")
        assert peek["found"] is True and peek["txn"] == "secret"


async def test_a_write_only_token_still_schedules_and_read_write_still_cancels_in_a_batch():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", token="acme-wo", json=[schedule("a")])
        assert (status, body["results"][0]["status"]) == (200, "scheduled")
        status, _, body = await api.call("POST", "/api/v1/timers", token="acme-rw", json=[cancel("a")])
        assert (status, body["results"][0]["status"]) == (200, "cancelled")
