"""The timer routes over a real app and a real TenantState: statuses and access levels. The shapes
are in test_api_timers_parse.py, the gates in the order of docs/spec.md section 2 in
test_api_timers_gates.py."""

from __future__ import annotations

import pytest

from test_api_fake_group import START_MS, ApiHarness
from timer_bodies import PAYLOAD, cancel, schedule


# --- statuses ----------------------------------------------------------------------------------

async def test_schedule_reschedule_cancel_absent_in_input_order():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json={"operations": [schedule("a"), schedule("b", delayMs=1000)]})
        assert status == 200
        first, second = body["results"]
        assert first == {"ok": True, "status": "scheduled", "queue": "q", "timerKey": "a", "txn": "txn-a",
                         "messageId": first["messageId"], "deliverAt": START_MS + 300}
        assert second["deliverAt"] == START_MS + 1000 and second["messageId"] != first["messageId"]
        status, _, body = await api.call("POST", "/api/v1/timers", json=[
            schedule("a", op="reschedule", txn="txn-a2", delayMs=50), cancel("b", txn="txn-b"), cancel("never")])
        assert [r["status"] for r in body["results"]] == ["rescheduled", "cancelled", "absent"]
        assert [r["ok"] for r in body["results"]] == [True, True, False]
        assert body["results"][0]["txn"] == "txn-a2" and body["results"][0]["messageId"] != first["messageId"]
        assert body["results"][1]["txn"] == "txn-b"


async def test_producer_sub_is_the_tokens_and_message_ids_are_uuid7():
    async with ApiHarness() as api:
        _, _, body = await api.call("POST", "/api/v1/timers", token="acme-wo", json=[schedule()])
        message_id = body["results"][0]["messageId"]
        assert message_id[14] == "7"  # version nibble of a UUIDv7
        command = api.groups["acme"].writes()[0]
        assert command["producerSub"] == api.serving.config.find_token("acme-wo").sub
        [group] = command["ops"]  # a call of plain schedules is one schedule_rows group
        assert group["op"] == "schedule_rows"
        assert group["rows"] == [["q", "k1", "Default", 300, "txn-k1", message_id, b'{"hi":1}', False, False]]


async def test_delete_route_cancels_echoes_txn_and_answers_fired_after_the_fire():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("tenant/42", txn="t-42")])
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/tenant/42?txn=t-42")
        assert (status, body) == (200, {"ok": True, "status": "cancelled", "queue": "q", "timerKey": "tenant/42", "txn": "t-42",
                                        "requestTxn": "t-42"})
        await api.call("POST", "/api/v1/timers", json=[schedule("f", txn="t-f")])
        api.groups["acme"].advance(300)
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/f?txn=t-f")
        assert (status, body["ok"], body["status"], body["txn"], body["requestTxn"]) == (200, False, "fired", "t-f", "t-f")


async def test_cancel_of_another_tenants_timer_is_absent():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", token="globex-rw", json=[schedule("shared")])
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/shared", token="acme-rw")
        assert (status, body["status"], body["ok"]) == (200, "absent", False)
        assert api.groups["globex"].state.counters()["pendingTimers"] == 1


async def test_peek_and_list():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("b"), schedule("a/1", partition="p1"), schedule("c")])
        status, _, peek = await api.call("GET", "/api/v1/timers/q/a/1", token="acme-ro")
        assert status == 200
        assert set(peek) == {"found", "status", "queue", "timerKey", "partition", "deliverAt", "dueAt", "txn", "messageId", "payload",
                             "payloadZstd", "encrypted", "producerSub", "attempts", "lastError", "claimed",
                             "createdAt", "updatedAt"}
        assert (peek["found"], peek["partition"], peek["payload"], peek["claimed"]) == (True, "p1", PAYLOAD, False)
        status, _, miss = await api.call("GET", "/api/v1/timers/q/none", token="acme-ro")
        assert (status, miss) == (200, {"found": False, "status": "absent", "queue": "q", "timerKey": "none"})
        status, _, page = await api.call("GET", "/api/v1/timers/q?limit=2", token="acme-ro")
        assert [r["timerKey"] for r in page["rows"]] == ["a/1", "b"] and page["truncated"] is True
        assert all("payload" not in r for r in page["rows"])
        _, _, rest = await api.call("GET", f"/api/v1/timers/q?after={page['nextAfter']}&limit=0", token="acme-ro")
        assert [r["timerKey"] for r in rest["rows"]] == ["c"]  # limit 0 is clamped to 1
        status, _, body = await api.call("GET", "/api/v1/timers/q?limit=many", token="acme-ro")
        assert (status, body["error"]) == (400, "timers_bad_request")


async def test_url_decoding_applies_once():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("a%2Fb"), schedule("x y")])
        _, _, body = await api.call("GET", "/api/v1/timers/q/a%252Fb", token="acme-ro")
        assert body["found"] is True and body["timerKey"] == "a%2Fb"
        _, _, body = await api.call("GET", "/api/v1/timers/q/x%20y", token="acme-ro")
        assert body["found"] is True


# --- access --------------------------------------------------------------------------------------

ACCESS = [
    # method, path, allowed levels
    ("POST", "/api/v1/timers", {"admin", "read-write", "write-only"}),
    ("DELETE", "/api/v1/timers/q/k1", {"admin", "read-write"}),
    ("GET", "/api/v1/timers/q/k1", {"admin", "read-write", "read-only"}),
    ("GET", "/api/v1/timers/q", {"admin", "read-write", "read-only"}),
]


@pytest.mark.parametrize("method,path,allowed", ACCESS)
async def test_levels_401_and_403(method, path, allowed):
    async with ApiHarness() as api:
        body = [schedule()] if method == "POST" else None
        for token in (None, "wrong-token"):
            status, _, answer = await api.call(method, path, token=token, json=body)
            assert (status, answer["error"]) == (401, "unauthorized")
        for level, token in {"admin": "acme-admin", "read-write": "acme-rw", "read-only": "acme-ro", "write-only": "acme-wo"}.items():
            status, _, answer = await api.call(method, path, token=token, json=body)
            if level in allowed:
                assert status == 200, (level, answer)
            else:
                assert (status, answer["error"]) == (403, "forbidden"), level


async def test_auth_comes_before_shape():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", token="acme-ro", json=[{"bad": 1}])
        assert (status, body["error"]) == (403, "forbidden")
        status, _, body = await api.call("POST", "/api/v1/timers", token=None, data=b"{")
        assert (status, body["error"]) == (401, "unauthorized")
