"""Refusals at schedule time: a negative delayMs (400 naming the field), error texts in the units of
their field, and a payload over the destination queue's maxPayloadBytes (413 on the timer route, a
rollback with reason payload_too_large in a transaction, the state's own refusal in apply)."""

from __future__ import annotations

import base64

import pytest

from queen_raft.api.errors import ApiError
from queen_raft.api.timer_parsing import parse_timer_op, parse_timer_ops
from queen_raft.state import TenantState
from test_api_fake_group import ApiHarness

T0 = 1_700_000_000_000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def schedule(key: str = "k1", queue: str = "q", **fields) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 300, "txn": f"txn-{key}",
            "payload": _b64(b"hello"), **fields}


# --- a negative delayMs ------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [{}, {"partition": "p1"}, {"payloadZstd": False}])
def test_negative_delay_is_400_naming_the_field_on_both_parse_paths(extra):
    for body in ([schedule(delayMs=-1, **extra)], [schedule(delayMs=-1, **extra), {"op": "cancel", "queue": "q", "timerKey": "x"}]):
        with pytest.raises(ApiError) as refused:
            parse_timer_ops(body, 256)
        assert (refused.value.status, refused.value.code) == (400, "timers_bad_request")
        assert "delayMs" in refused.value.message and "-1" in refused.value.message


def test_zero_delay_is_accepted_and_due_at_once():
    assert parse_timer_op(schedule(delayMs=0), 0)["delayMs"] == 0


async def test_negative_delay_on_the_route_and_in_a_transaction_changes_nothing():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(delayMs=-5)])
        assert (status, body["error"]) == (400, "timers_bad_request") and "delayMs" in body["message"]
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"timers": [schedule(delayMs=-5)]})
        assert (status, body["reason"]) == (400, "bad_request") and "delayMs" in body["message"]
        assert api.groups["acme"].writes() == []


# --- units ---------------------------------------------------------------------------------------------

async def test_horizon_refusal_names_the_horizon_in_ms():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_HORIZON_S": "10"}) as api:
        for ops in ([schedule(delayMs=10_001)], [schedule(delayMs=10_001), {"op": "cancel", "queue": "q", "timerKey": "x"}]):
            status, _, body = await api.call("POST", "/api/v1/timers", json=ops)
            assert (status, body["error"]) == (403, "timer_horizon_exceeded")
            assert "10000 ms" in body["message"], body["message"]


# --- a payload over the queue's maxPayloadBytes ---------------------------------------------------------

def _state_schedule(key: str, payload: bytes, queue: str = "small") -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default", "delayMs": 1000,
            "txn": f"t-{key}", "messageId": f"m-{key}", "payload": payload, "payloadZstd": False, "encrypted": False}


def _small_queue_state() -> TenantState:
    state = TenantState()
    answer = state.apply({"op": "configure", "now": T0, "queue": "small", "options": {"maxPayloadBytes": 4}})
    assert "error" not in answer, answer
    return state


@pytest.mark.parametrize("as_rows", [False, True])
def test_state_refuses_a_payload_over_the_queue_bound_when_the_entry_asks(as_rows):
    state = _small_queue_state()
    ops = [_state_schedule("fits", b"1234"), _state_schedule("big", b"12345")]
    if as_rows:
        fields = ("queue", "timerKey", "partition", "delayMs", "txn", "messageId", "payload", "payloadZstd", "encrypted")
        ops = [{"op": "schedule_rows", "rows": [[op[f] for f in fields] for op in ops]}]
    answer = state.apply({"op": "timers", "now": T0, "producerSub": "s", "ops": ops, "checkPayloadBound": True})
    assert answer["error"] == "payload_too_large" and answer["index"] == 1
    assert "4" in answer["message"] and "maxPayloadBytes" in answer["message"]
    assert state.counters()["pendingTimers"] == 0


def test_an_entry_without_the_flag_replays_as_before():
    state = _small_queue_state()
    answer = state.apply({"op": "timers", "now": T0, "producerSub": "s", "ops": [_state_schedule("big", b"12345")]})
    assert answer["results"][0]["status"] == "scheduled"


def test_a_queue_never_configured_bounds_by_the_default_options():
    state = TenantState()
    answer = state.apply({"op": "timers", "now": T0, "producerSub": "s", "checkPayloadBound": True,
                          "ops": [_state_schedule("ok", b"x" * 1024, queue="fresh")]})
    assert answer["results"][0]["status"] == "scheduled"


async def test_route_answers_413_naming_the_queue_limit_and_schedules_nothing():
    async with ApiHarness() as api:
        status, _, _ = await api.call("POST", "/api/v1/configure", json={"queue": "small", "options": {"maxPayloadBytes": 4}})
        assert status == 200
        writes = len(api.groups["acme"].writes())
        for ops in ([schedule(queue="small", payload=_b64(b"12345"))],
                    [schedule(queue="small", payload=_b64(b"12345")), {"op": "cancel", "queue": "q", "timerKey": "x"}]):
            status, _, body = await api.call("POST", "/api/v1/timers", json=ops)
            assert (status, body["error"]) == (413, "payload_too_large"), body
            assert "maxPayloadBytes" in body["message"] and "4" in body["message"]
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"timers": [schedule(queue="small", payload=_b64(b"12345"))]})
        assert status == 200 and body["success"] is False and body["reason"] == "payload_too_large" and body["index"] == 0
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(queue="small", payload=_b64(b"1234"))])
        assert status == 200 and body["results"][0]["status"] == "scheduled"
        assert len(api.groups["acme"].writes()) > writes


def test_a_zstd_payload_is_bounded_decompressed_as_the_fire_measures_it():
    import zstandard
    state = _small_queue_state()
    small = zstandard.ZstdCompressor().compress(b"1234")
    big = zstandard.ZstdCompressor().compress(b"1" * 64)
    ops = [dict(_state_schedule("fits", small), payloadZstd=True), dict(_state_schedule("big", big), payloadZstd=True)]
    answer = state.apply({"op": "timers", "now": T0, "producerSub": "s", "ops": ops, "checkPayloadBound": True})
    assert answer["error"] == "payload_too_large" and answer["index"] == 1 and "decompresses" in answer["message"]


def test_a_transaction_refusal_indexes_the_schedule_in_the_one_index_space():
    state = _small_queue_state()
    cancel = {"op": "cancel", "queue": "small", "timerKey": "none", "txn": None}
    answer = state.apply({"op": "transaction", "now": T0, "producerSub": "s", "operations": [], "kv": [],
                          "timers": [cancel, _state_schedule("big", b"12345")], "checkPayloadBound": True})
    assert (answer["success"], answer["reason"], answer["index"]) == (False, "payload_too_large", 1)
