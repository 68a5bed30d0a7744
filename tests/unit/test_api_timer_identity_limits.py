"""A timer's identities (queue, timerKey, partition, txn) are names, bounded like KV's ns and key by
MAX_NAME_BYTES (UTF-8 bytes): beyond it 400 `timers_bad_request` naming the field, nothing proposed."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from queen_raft.state.limits import MAX_NAME_BYTES
from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b"{}").decode()
AT_BOUND = "\u00e9" * (MAX_NAME_BYTES // 2)  # 2 bytes a character: exactly the bound
PAST_BOUND = AT_BOUND + "x"
ONE_MB = "k" * 1_000_000


def schedule(**fields) -> dict:
    return {"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "txn": "t", "payload": PAYLOAD, **fields}


@pytest.mark.parametrize("field", ["queue", "timerKey", "partition", "txn"])
@pytest.mark.parametrize("name", [PAST_BOUND, ONE_MB], ids=["bound + 1 byte", "1 MB"])
async def test_an_over_long_identity_is_400_naming_the_field(field, name):
    async with ApiHarness() as api:
        for body in ([schedule(**{field: name})], [schedule(timerKey="other"), schedule(**{field: name})]):
            status, _, answer = await api.call("POST", "/api/v1/timers", json=body)
            assert (status, answer["error"]) == (400, "timers_bad_request"), answer
            assert field in answer["message"] and str(MAX_NAME_BYTES) in answer["message"]
        status, _, answer = await api.call("POST", "/api/v1/transaction", json={"timers": [schedule(**{field: name})]})
        assert (status, answer["reason"], answer["index"]) == (400, "bad_request", 0), answer
        assert api.groups["acme"].writes() == []


@pytest.mark.parametrize("field", ["queue", "timerKey", "txn"])
async def test_an_over_long_cancel_identity_is_400(field):
    op = {"op": "cancel", "queue": "q", "timerKey": "k", field: PAST_BOUND}
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/timers", json=[op])
        assert (status, answer["error"]) == (400, "timers_bad_request"), answer
        path = f"/api/v1/timers/{quote(op['queue'], safe='')}/{quote(op['timerKey'], safe='')}?txn={quote(op.get('txn') or '')}"
        status, _, answer = await api.call("DELETE", path)
        assert (status, answer["error"]) == (400, "timers_bad_request"), answer
        assert api.groups["acme"].writes() == []


async def test_identities_at_the_bound_are_accepted():
    async with ApiHarness() as api:
        fields = {"queue": AT_BOUND, "timerKey": AT_BOUND, "partition": AT_BOUND, "txn": AT_BOUND}
        status, _, answer = await api.call("POST", "/api/v1/timers", json=[schedule(**fields)])
        assert (status, answer["results"][0]["status"]) == (200, "scheduled"), answer
        status, _, answer = await api.call("DELETE", f"/api/v1/timers/{quote(AT_BOUND, safe='')}/{quote(AT_BOUND)}")
        assert (status, answer["status"]) == (200, "cancelled"), answer
