"""Ack batch with every status, the DLQ list and replay, usage, and the gate ladder's counting."""

from __future__ import annotations

import base64

from test_api_fake_group import ApiHarness

GARBAGE_ZSTD = base64.b64encode(b"not zstd at all").decode()


async def push_and_pop(api: ApiHarness, count: int, queue: str = "q") -> dict:
    await api.call("POST", "/api/v1/push", json={"items": [{"queue": queue, "payload": i, "transactionId": f"m{i}"}
                                                           for i in range(count)]})
    status, _, popped = await api.call("GET", f"/api/v1/pop/queue/{queue}?batch={count}")
    assert status == 200 and len(popped["messages"]) == count
    return popped


async def test_ack_batch_every_status():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/configure", json={"queue": "q", "options": {"retryLimit": 0}})
        popped = await push_and_pop(api, 4)
        status, _, body = await api.call("POST", "/api/v1/ack/batch", json={
            "leaseId": popped["leaseId"], "acknowledgments": [
                {"transactionId": "m0", "status": "completed"},
                {"transactionId": "m1", "status": "failed", "error": "boom"},
                {"transactionId": "m2", "status": "retry"},
                {"offset": 3, "status": "dlq", "error": "poison"},
            ]})
        assert status == 200
        assert [(r["success"], r["dlq"]) for r in body["results"]] == [(True, False), (True, True), (True, False), (True, True)]
        _, _, listed = await api.call("GET", "/api/v1/dlq?queue=q", token="acme-ro")
        assert sorted(r["transactionId"] for r in listed["rows"]) == ["m1", "m3"]
        assert {r["error"] for r in listed["rows"]} == {"boom", "poison"}
        status, _, again = await api.call("GET", "/api/v1/pop/queue/q")
        assert [m["transactionId"] for m in again["messages"]] == ["m2"]  # retry: delivered again
        status, _, body = await api.call("POST", "/api/v1/ack/batch", json={
            "leaseId": "nope", "acknowledgments": [{"transactionId": "m2"}]})
        assert body["results"][0]["success"] is False and body["results"][0]["error"] == "invalid_lease"


async def test_dlq_replay_pushes_again_once_and_list_limits():
    async with ApiHarness() as api:
        popped = await push_and_pop(api, 2)
        await api.call("POST", "/api/v1/ack/batch", json={"leaseId": popped["leaseId"], "acknowledgments": [
            {"transactionId": "m0", "status": "dlq"}, {"transactionId": "m1", "status": "dlq"}]})
        _, _, listed = await api.call("GET", "/api/v1/dlq?limit=1", token="acme-ro")
        assert len(listed["rows"]) == 1
        row = listed["rows"][0]
        assert base64.b64decode(row["payload"]) == b"0" and row["consumerGroup"] == "__QUEUE_MODE__"
        status, _, replayed = await api.call("POST", f"/api/v1/dlq/{row['dlqId']}/replay")
        assert (status, replayed["status"], replayed["offset"]) == (200, "queued", 2)
        assert replayed["transactionId"] == replayed["messageId"]
        status, _, body = await api.call("POST", f"/api/v1/dlq/{row['dlqId']}/replay")
        assert (status, body["error"]) == (404, "not_found")
        assert (await api.call("POST", f"/api/v1/dlq/{row['dlqId']}/replay", token="acme-ro"))[0] == 403
        assert (await api.call("GET", "/api/v1/dlq", token="acme-wo"))[0] == 403
        status, _, body = await api.call("GET", "/api/v1/dlq?limit=x", token="acme-ro")
        assert (status, body["error"]) == (400, "bad_request")


async def test_timer_dlq_row_replay_is_409():
    async with ApiHarness(env={"QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": "1"}) as api:
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[{
            "op": "schedule", "queue": "q", "timerKey": "bad", "delayMs": 0, "txn": "t", "payload": GARBAGE_ZSTD,
            "payloadZstd": True}])
        assert status == 200
        _, _, listed = await api.call("GET", "/api/v1/dlq?queue=q", token="acme-ro")
        (row,) = listed["rows"]
        assert (row["consumerGroup"], row["offset"], row["timerKey"]) == ("__timer__", -1, "bad")
        status, _, body = await api.call("POST", f"/api/v1/dlq/{row['dlqId']}/replay")
        assert (status, body["error"]) == (409, "dlq_replay_refused")
        _, _, listed = await api.call("GET", "/api/v1/dlq?queue=q", token="acme-ro")
        assert len(listed["rows"]) == 1


async def test_usage_counts_schedules_and_push_items_not_cancels_or_fires_and_is_admin_only():
    async with ApiHarness() as api:
        schedule = {"op": "schedule", "queue": "q", "delayMs": 0, "payload": "AA=="}
        await api.call("POST", "/api/v1/timers", json=[dict(schedule, timerKey="a", txn="ta"),
                                                       dict(schedule, timerKey="b", txn="tb", delayMs=60_000)])
        await api.call("POST", "/api/v1/timers", json=[dict(schedule, timerKey="b", txn="tb2", delayMs=60_000)])
        await api.call("DELETE", "/api/v1/timers/q/b")
        await api.call("POST", "/api/v1/push", json={"items": [{"queue": "q", "payload": 1}, {"queue": "q", "payload": 2}]})
        assert (await api.call("GET", "/api/v1/usage", token="acme-rw"))[0] == 403
        status, _, usage = await api.call("GET", "/api/v1/usage", token="acme-admin")
        assert status == 200
        assert usage["billedMessages"] == 5  # 2 schedules + 1 reschedule + 2 push items; no cancel, no fire
        assert usage["fired"]["appended"] == 1 and usage["pushedMessages"] == 3
        assert usage["pendingTimers"] == 0 and usage["tenant"] == "acme"
        _, _, other = await api.call("GET", "/api/v1/usage", token="globex-admin")
        assert other["billedMessages"] == 0


async def test_pause_is_replicated_state_not_node_memory():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        assert api.groups["acme"].writes()[-1]["op"] == "admin"
        restored = type(api.groups["acme"].state).restore(api.groups["acme"].state.snapshot())
        assert restored.scheduling_paused is True  # survives a restart from the snapshot
        _, _, usage = await api.call("GET", "/api/v1/usage", token="acme-admin")
        assert usage["schedulingPaused"] is True


def rejected(api: ApiHarness, reason: str) -> float:
    return api.serving.metrics.schedule_rejected.labels(reason=reason)._value.get()


async def test_every_gate_refusal_is_counted_and_delete_passes_pause_quota_and_rate():
    env = {"QUEEN_TIMERS_MAX_PENDING": "1", "QUEEN_TIMERS_RATE": "1", "QUEEN_TIMERS_RATE_BURST": "2",
           "QUEEN_TIMERS_MAX_HORIZON_S": "60", "QUEEN_TIMERS_MAX_PAYLOAD_BYTES": "4"}
    async with ApiHarness(env=env) as api:
        api.serving.timer_rate.monotonic = lambda: 100.0  # the clock stands still: no token comes back
        op = {"op": "schedule", "queue": "q", "timerKey": "a", "delayMs": 30_000, "txn": "t", "payload": "AA=="}
        assert (await api.call("POST", "/api/v1/timers", json=[op]))[0] == 200  # token 1 of 2; quota now full
        status, _, body = await api.call("POST", "/api/v1/timers", json=[dict(op, timerKey="b")])
        assert (status, body["error"]) == (403, "timers_quota_exceeded")  # token 2 of 2
        status, _, body = await api.call("POST", "/api/v1/timers", json=[dict(op, timerKey="c")])
        assert (status, body["error"]) == (429, "rate_limited")
        status, _, body = await api.call("POST", "/api/v1/timers", json=[dict(op, timerKey=1)])
        assert (status, body["error"]) == (400, "timers_bad_request")
        await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        status, _, body = await api.call("POST", "/api/v1/timers", json=[dict(op, timerKey="d")])
        assert (status, body["error"]) == (503, "timers_disabled")
        assert (await api.call("POST", "/api/v1/timers", token=None, json=[op]))[0] == 401
        assert (await api.call("POST", "/api/v1/timers", token="acme-ro", json=[op]))[0] == 403
        for reason in ("timers_quota_exceeded", "rate_limited", "timers_bad_request", "timers_disabled",
                       "unauthorized", "forbidden"):
            assert rejected(api, reason) == 1, reason
        # Paused, over quota and out of rate tokens: the DELETE route still cancels.
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/a?txn=t")
        assert (status, body["status"], body["txn"]) == (200, "cancelled", "t")
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0


async def test_horizon_and_payload_refusals_are_counted():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_HORIZON_S": "60", "QUEEN_TIMERS_MAX_PAYLOAD_BYTES": "4"}) as api:
        op = {"op": "schedule", "queue": "q", "timerKey": "a", "delayMs": 61_000, "txn": "t", "payload": "AA=="}
        assert (await api.call("POST", "/api/v1/timers", json=[op]))[2]["error"] == "timer_horizon_exceeded"
        big = dict(op, delayMs=1, payload=base64.b64encode(b"12345").decode())
        assert (await api.call("POST", "/api/v1/timers", json=[big]))[2]["error"] == "payload_too_large"
        assert rejected(api, "timer_horizon_exceeded") == 1 and rejected(api, "payload_too_large") == 1
        assert api.groups["acme"].writes() == []


async def test_a_pause_not_yet_applied_by_the_gate_s_replica_is_still_refused_by_the_entry():
    # The gate reads this node's replica; a follower may not have applied an acknowledged pause
    # yet. The state refuses schedules ordered after the pause, and the API answers it the same way.
    from queen_raft.state import TenantState
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/admin/timers/pause", token="acme-admin")
        stale_replica = TenantState()
        api.groups["acme"].peek_local = lambda fn: fn(stale_replica)
        op = {"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "payload": "AA==", "txn": "t1"}
        status, headers, body = await api.call("POST", "/api/v1/timers", json={"operations": [op]})
        assert (status, body["error"], body["reason"]) == (503, "timers_disabled", "paused")
        assert int(headers["Retry-After"]) > 0
        status, headers, body = await api.call("POST", "/api/v1/transaction",
                                               json={"timers": [op]})
        assert (status, body["error"], body["reason"]) == (503, "timers_disabled", "paused")
        assert api.groups["acme"].state.counters()["pendingTimers"] == 0
