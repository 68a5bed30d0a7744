"""After the fire, DELETE and GET of a timer say where its message went (`fired`, `dead_lettered`)
while the state remembers the fire, and `absent` after; a transaction's cancel answers the same.
Every answer here is also checked against the OpenAPI document (ApiHarness)."""

from __future__ import annotations

import base64

from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b'{"hi":1}').decode()
WINDOW_S = 60


def schedule(key: str, txn: str, queue: str = "q", delay_ms: int = 300, payload: str = PAYLOAD) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay_ms, "txn": txn, "payload": payload}


async def configure(api: ApiHarness, queue: str = "q", **options) -> None:
    status, _, _ = await api.call("POST", "/api/v1/configure", json={"queue": queue, "options": options})
    assert status == 200


async def test_delete_after_the_fire_answers_fired_with_where_the_message_is():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "push", "queue": "q", "payload": {"first": True}, "transactionId": "earlier"}]})
        await api.call("POST", "/api/v1/timers", json=[schedule("order/9137", "fire-txn")])
        fired_at = api.groups["acme"].now_ms + 300
        api.groups["acme"].advance(300)
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/order/9137?txn=sent-txn")
        assert (status, body) == (200, {
            "ok": False, "status": "fired", "queue": "q", "timerKey": "order/9137", "txn": "fire-txn",
            "partition": "Default", "offset": 1, "messageId": body["messageId"], "firedAt": fired_at,
            "requestTxn": "sent-txn"})
        status, _, peek = await api.call("GET", "/api/v1/timers/q/order/9137", token="acme-ro")
        assert (status, peek) == (200, {
            "found": False, "status": "fired", "queue": "q", "timerKey": "order/9137", "txn": "fire-txn",
            "partition": "Default", "offset": 1, "messageId": body["messageId"], "firedAt": fired_at})
        # The answer names the message: at that partition and offset the log holds that txn.
        message = api.groups["acme"].state.fetch("q", "Default", 1, 1)[0]
        assert (message["transactionId"], message["messageId"]) == ("fire-txn", body["messageId"])


async def test_fired_is_forgotten_after_the_queues_dedup_window():
    async with ApiHarness() as api:
        await configure(api, dedupWindowSeconds=WINDOW_S)
        await api.call("POST", "/api/v1/timers", json=[schedule("k", "t")])
        api.groups["acme"].advance(300)
        api.groups["acme"].advance(WINDOW_S * 1000 - 1)
        assert (await api.call("DELETE", "/api/v1/timers/q/k"))[2]["status"] == "fired"
        api.groups["acme"].advance(1)
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/k")
        assert (status, body) == (200, {"ok": False, "status": "absent", "queue": "q", "timerKey": "k", "txn": None,
                                        "requestTxn": None})
        status, _, peek = await api.call("GET", "/api/v1/timers/q/k", token="acme-ro")
        assert peek == {"found": False, "status": "absent", "queue": "q", "timerKey": "k"}


async def test_a_timer_filed_in_the_dlq_answers_dead_lettered_with_its_dlq_id():
    async with ApiHarness() as api:
        # Lowered after the schedule: a timer over its queue's bound is refused at schedule time.
        await api.call("POST", "/api/v1/timers", json=[schedule("poison", "t-poison")])
        await configure(api, maxPayloadBytes=2)
        for _ in range(5):  # the default policy's maxAttempts; each backoff is at most 60 s
            api.groups["acme"].advance(60_000)
        _, _, dlq = await api.call("GET", "/api/v1/dlq?queue=q", token="acme-ro")
        [row] = dlq["rows"]
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/poison")
        assert (status, body["ok"], body["status"], body["dlqId"], body["txn"]) == (
            200, False, "dead_lettered", row["dlqId"], "t-poison")
        assert "offset" not in body
        _, _, peek = await api.call("GET", "/api/v1/timers/q/poison", token="acme-ro")
        assert (peek["found"], peek["status"], peek["dlqId"]) == (False, "dead_lettered", row["dlqId"])


async def test_a_rescheduled_key_answers_pending_and_a_cancel_of_it_forgets_the_fire():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("k", "first")])
        api.groups["acme"].advance(300)
        await api.call("POST", "/api/v1/timers", json=[schedule("k", "second", delay_ms=60_000)])
        _, _, peek = await api.call("GET", "/api/v1/timers/q/k", token="acme-ro")
        assert (peek["found"], peek["status"], peek["txn"]) == (True, "pending", "second")
        _, _, body = await api.call("DELETE", "/api/v1/timers/q/k")
        assert (body["ok"], body["status"], body["txn"]) == (True, "cancelled", "second")
        _, _, body = await api.call("DELETE", "/api/v1/timers/q/k")
        assert body["status"] == "absent"


async def test_a_cancel_inside_a_transaction_answers_fired_too():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("k", "t-k")])
        api.groups["acme"].advance(300)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [{"op": "cancel", "queue": "q", "timerKey": "k", "txn": "mine"}]})
        assert status == 200 and body["success"] is True
        [result] = body["results"]
        assert (result["ok"], result["status"], result["txn"], result["partition"], result["offset"],
                result["requestTxn"]) == (False, "fired", "t-k", "Default", 0, "mine")
