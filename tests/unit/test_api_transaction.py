"""POST /api/v1/transaction over a real app and a real TenantState: all or nothing, one index space."""

from __future__ import annotations

import base64

import pytest

from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b'{"type":"hold-expired"}').decode()


def timer(key: str, queue: str = "bookings", **fields) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 900_000, "txn": f"t-{key}",
            "payload": PAYLOAD, **fields}


async def delivered(api: ApiHarness, queue: str = "orders", group: str | None = None) -> dict:
    """Pushes one message and pops it: the lease and transactionId an ack needs."""
    await api.call("POST", "/api/v1/push", json={"items": [{"queue": queue, "payload": {"n": 1}, "transactionId": "m1"}]})
    query = f"?consumerGroup={group}" if group else ""
    status, _, popped = await api.call("GET", f"/api/v1/pop/queue/{queue}{query}")
    assert status == 200
    return popped


def digest(api: ApiHarness, tenant: str = "acme") -> bytes:
    """The tenant's state without its clock: what a refused transaction must leave alone."""
    state = api.groups[tenant].state
    clock, state.clock = state.clock, 0
    try:
        return state.snapshot()
    finally:
        state.clock = clock


async def test_saga_ack_kv_put_and_timer_commit_together_in_one_index_space():
    async with ApiHarness() as api:
        popped = await delivered(api, group="bookings")
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "ack", "consumerGroup": "bookings", "leaseId": popped["leaseId"],
                            "transactionId": "m1", "status": "completed"},
                           {"type": "push", "queue": "audit", "payload": {"held": "b1"}}],
            "kv": [{"op": "put", "ns": "bookings", "key": "b1", "value": {"state": "held"}, "ttlSeconds": 604800}],
            "timers": [timer("b1", partition="b1")],
        })
        assert status == 200 and body["success"] is True
        ack, push, kv_row, scheduled = body["results"]
        assert ack["success"] is True and push["status"] == "queued"
        assert kv_row["value"] == {"state": "held"} and scheduled["status"] == "scheduled"
        state = api.groups["acme"].state
        assert state.peek_timer("bookings", "b1")["partition"] == "b1"
        assert state.kv_get("bookings", "b1")["version"] == 1
        assert not state.deliverable("orders", None, "bookings")  # acked
        assert state.counters()["billedMessages"] == 3  # the first push, the audit push, the schedule


async def test_rollback_on_a_kv_precondition_leaves_ack_push_kv_and_timer_undone():
    async with ApiHarness() as api:
        popped = await delivered(api)
        await api.call("POST", "/api/v1/timers", json=[timer("keep")])
        before = digest(api)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "ack", "leaseId": popped["leaseId"], "transactionId": "m1"},
                           {"type": "push", "queue": "audit", "payload": 1}],
            "kv": [{"op": "put", "ns": "b", "key": "k", "value": 1},
                   {"op": "check", "ns": "b", "key": "other", "expectedVersion": 3}],
            "timers": [timer("new"), {"op": "cancel", "queue": "bookings", "timerKey": "keep"}],
        })
        assert (status, body["success"], body["reason"], body["index"]) == (200, False, "kv_precondition", 3)
        assert isinstance(body["error"], str)
        assert digest(api) == before  # the cancel shared the transaction's fate: the timer is kept
        assert api.groups["acme"].state.peek_timer("bookings", "keep") is not None


async def test_rejected_ack_and_duplicate_ack_are_rollbacks():
    async with ApiHarness() as api:
        popped = await delivered(api)
        before = digest(api)
        _, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "ack", "leaseId": "not-a-lease", "transactionId": "m1"}],
            "kv": [{"op": "put", "ns": "b", "key": "k", "value": 1}]})
        assert (body["success"], body["reason"], body["index"]) == (False, "rejected_ack", 0)
        _, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "ack", "leaseId": popped["leaseId"], "transactionId": "m1"},
            {"type": "ack", "leaseId": popped["leaseId"], "offset": 0}]})
        assert (body["success"], body["reason"], body["index"]) == (False, "rejected_ack", 1)
        assert digest(api) == before


async def test_timers_quota_and_too_large_queue_are_rollbacks_and_the_quota_is_counted():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_PENDING": "1"}) as api:
        await api.call("POST", "/api/v1/timers", json=[timer("a")])
        before = digest(api)
        _, _, body = await api.call("POST", "/api/v1/transaction", json={
            "kv": [{"op": "put", "ns": "b", "key": "k", "value": 1}], "timers": [timer("b")]})
        assert (body["success"], body["reason"]) == (False, "timers_quota_exceeded")
        assert digest(api) == before
        assert api.serving.metrics.schedule_rejected.labels(reason="timers_quota_exceeded")._value.get() == 1
        await api.call("POST", "/api/v1/configure", json={"queue": "small", "options": {"maxSize": 1}})
        await api.call("POST", "/api/v1/push", json={"items": [{"queue": "small", "payload": 1}]})
        before = digest(api)
        _, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "push", "queue": "small", "payload": 2}]})
        assert (body["success"], body["reason"], body["index"]) == (False, "too_large", 0)
        assert digest(api) == before


async def test_horizon_payload_ceiling_and_op_cap_do_not_apply_inside():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_PAYLOAD_BYTES": "8", "QUEEN_TIMERS_MAX_HORIZON_S": "10"}) as api:
        ops = [timer(f"k{i}", delayMs=3_600_000) for i in range(300)]  # over 256, beyond 10 s, payload over 8 bytes
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"timers": ops})
        assert status == 200 and body["success"] is True and len(body["results"]) == 300
        status, _, body = await api.call("POST", "/api/v1/timers", json=ops[:1])
        assert (status, body["error"]) == (403, "timer_horizon_exceeded")


async def test_entry_over_the_raft_bound_is_413_too_large():
    from queen_raft.raft import EntryTooLarge

    async with ApiHarness() as api:
        async def refuse(command):
            raise EntryTooLarge("entry of 9000000 bytes exceeds MAX_ENTRY_BYTES")

        api.groups["acme"].propose = refuse
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"timers": [timer("a")]})
        assert (status, body["error"], body["reason"], body["success"]) == (413, "too_large", "too_large", False)


async def test_paused_scheduling_refuses_schedules_not_cancels():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[timer("a")])
        await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        status, headers, body = await api.call("POST", "/api/v1/transaction", json={"timers": [timer("b")]})
        assert (status, body["error"], "Retry-After" in headers) == (503, "timers_disabled", True)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [{"op": "cancel", "queue": "bookings", "timerKey": "a"}]})
        assert (status, body["success"], body["results"][0]["status"]) == (200, True, "cancelled")
        assert api.serving.metrics.schedule_rejected.labels(reason="timers_disabled")._value.get() == 1


BAD_TRANSACTIONS = {
    "not an object": ([], None),
    "empty": ({}, None),
    "unknown top-level": ({"timers": [timer("a")], "x": 1}, None),
    "operations not a list": ({"operations": {}}, None),
    "unknown type": ({"operations": [{"type": "pop", "queue": "q"}]}, 0),
    "push without queue": ({"operations": [{"type": "push", "payload": 1}]}, 0),
    "push server-owned": ({"operations": [{"type": "push", "queue": "q", "payload": 1, "messageId": "m"}]}, 0),
    "ack without lease": ({"operations": [{"type": "ack", "transactionId": "t"}]}, 0),
    "ack bad status": ({"operations": [{"type": "ack", "leaseId": "l", "transactionId": "t", "status": "x"}]}, 0),
    "kv bad op": ({"operations": [{"type": "push", "queue": "q", "payload": 1}], "kv": [{"op": "x", "ns": "n", "key": "k"}]}, 1),
    "timer bad base64": ({"kv": [{"op": "get", "ns": "n", "key": "k"}], "timers": [timer("a", payload="%%")]}, 1),
    "timer server-owned": ({"timers": [timer("a", producerSub="x")]}, 0),
    "timer twice": ({"timers": [timer("a"), {"op": "cancel", "queue": "bookings", "timerKey": "a"}]}, 1),
    "too many": ({"timers": [timer(f"k{i}") for i in range(4097)]}, None),
}


@pytest.mark.parametrize("case", sorted(BAD_TRANSACTIONS))
async def test_bad_transaction_is_400_with_reason_and_index_and_proposes_nothing(case):
    body, index = BAD_TRANSACTIONS[case]
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/transaction", json=body)
        assert (status, answer["error"], answer["reason"], answer["success"]) == (400, "bad_request", "bad_request", False)
        assert answer.get("index") == index
        assert api.groups["acme"].writes() == []


async def test_levels_write_only_may_push_and_schedule_only():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/transaction", token="acme-wo", json={
            "operations": [{"type": "push", "queue": "q", "payload": 1}], "timers": [timer("a")]})
        assert (status, body["success"]) == (200, True)
        for extra in ({"kv": [{"op": "get", "ns": "n", "key": "k"}]},
                      {"timers": [{"op": "cancel", "queue": "bookings", "timerKey": "a"}]},
                      {"operations": [{"type": "ack", "leaseId": "l", "offset": 0}]}):
            status, _, _ = await api.call("POST", "/api/v1/transaction", token="acme-wo", json=extra)
            assert status == 403, extra
        assert (await api.call("POST", "/api/v1/transaction", token="acme-ro", json={"timers": [timer("b")]}))[0] == 403
        assert (await api.call("POST", "/api/v1/transaction", token=None, json={"timers": [timer("b")]}))[0] == 401


async def test_encrypting_queue_inside_a_transaction_is_encrypted_and_client_flag_refused():
    env = {"QUEEN_ENCRYPTION_KEY": "11" * 32}
    async with ApiHarness(env=env) as api:
        await api.call("POST", "/api/v1/configure", json={"queue": "secret", "options": {"encryptionEnabled": True}})
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "push", "queue": "secret", "payload": {"pin": 4321}}],
            "timers": [timer("s", queue="secret")]})
        assert body["success"] is True
        state = api.groups["acme"].state
        assert b"4321" not in state.fetch("secret")[0]["payload"]
        assert state.peek_timer("secret", "s")["encrypted"] is True
        assert b"hold-expired" not in state.peek_timer("secret", "s")["payload"]
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [timer("t", queue="secret", encrypted=True)]})
        assert (status, body["reason"]) == (400, "bad_request")
        # The broker decompresses a zstd payload before encrypting it; one that does not is the client's error.
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "timers": [timer("z", queue="secret", payloadZstd=True)]})
        assert (status, body["reason"], body["success"]) == (400, "bad_request", False)
        assert state.peek_timer("secret", "z") is None
