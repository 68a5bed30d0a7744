"""Push, pop (with the long poll), ack and fetch over a real app and a real TenantState."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from test_api_fake_group import ApiHarness


async def push(api: ApiHarness, items: list[dict], token: str = "acme-rw"):
    return await api.call("POST", "/api/v1/push", token=token, json={"items": items})


async def test_push_201_json_and_raw_payloads_come_back_as_sent():
    async with ApiHarness() as api:
        status, _, body = await push(api, [
            {"queue": "q", "payload": {"a": [1, "é"]}, "transactionId": "t1"},
            {"queue": "q", "payloadB64": base64.b64encode(b"\xff\x00").decode()},
            {"queue": "q", "payload": "text"},
            {"queue": "q", "payload": {"a": [1, "é"]}, "transactionId": "t1"},
        ])
        assert status == 201
        results = body["results"]
        assert [r["status"] for r in results] == ["queued", "queued", "queued", "duplicate"]
        assert results[3]["offset"] == 0 and results[3]["messageId"] == results[0]["messageId"]
        assert results[1]["transactionId"] == results[1]["messageId"]  # a missing txn gets the messageId
        status, _, fetched = await api.call("POST", "/api/v1/fetch", token="acme-ro",
                                            json={"entries": [{"queue": "q", "partition": "Default", "offset": 0}]})
        records = fetched["entries"][0]["records"]
        assert [r.get("payload", r.get("payloadB64")) for r in records] == [{"a": [1, "é"]}, "/wA=", "text"]
        assert "payload" not in records[1]


BAD_PUSHES = {
    "no items": {},
    "empty items": {"items": []},
    "no queue": {"items": [{"payload": 1}]},
    "no payload": {"items": [{"queue": "q"}]},
    "both payloads": {"items": [{"queue": "q", "payload": 1, "payloadB64": "AA=="}]},
    "bad base64": {"items": [{"queue": "q", "payloadB64": "%%"}]},
    "server-owned messageId": {"items": [{"queue": "q", "payload": 1, "messageId": "m"}]},
    "unknown field": {"items": [{"queue": "q", "payload": 1, "color": "red"}]},
    "too many": {"items": [{"queue": "q", "payload": i} for i in range(1001)]},
}


@pytest.mark.parametrize("case", sorted(BAD_PUSHES))
async def test_bad_push_is_400_and_changes_nothing(case):
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/push", json=BAD_PUSHES[case])
        assert (status, body["error"]) == (400, "bad_request")
        assert api.groups["acme"].writes() == []


async def test_pop_ack_cycle_and_204_when_empty():
    async with ApiHarness() as api:
        status, _, _ = await api.call("GET", "/api/v1/pop/queue/q")
        assert status == 204
        await push(api, [{"queue": "q", "payload": i, "transactionId": f"t{i}"} for i in range(3)])
        status, _, popped = await api.call("GET", "/api/v1/pop/queue/q/partition/Default?batch=2&consumerGroup=g")
        assert status == 200
        assert [m["payload"] for m in popped["messages"]] == [0, 1]
        message = popped["messages"][0]
        assert {"transactionId", "messageId", "partition", "offset", "leaseId", "deliveryAttempt", "payload",
                "createdAt", "consumerGroup"} <= set(message)
        assert message["leaseId"] == popped["leaseId"] and message["consumerGroup"] == "g"
        status, _, acked = await api.call("POST", "/api/v1/ack/batch", json={
            "consumerGroup": "g", "leaseId": popped["leaseId"],
            "acknowledgments": [{"partition": "Default", "transactionId": "t0", "status": "completed"},
                                {"partition": "Default", "offset": 1, "status": "completed"}]})
        assert status == 200 and [r["success"] for r in acked["results"]] == [True, True]
        _, _, popped = await api.call("GET", "/api/v1/pop/queue/q?consumerGroup=g&batch=10")
        assert [m["payload"] for m in popped["messages"]] == [2]
        status, _, acked = await api.call("POST", "/api/v1/ack", json={
            "consumerGroup": "g", "leaseId": popped["leaseId"], "partition": "Default", "transactionId": "t2",
            "status": "completed"})
        assert status == 200 and acked["results"][0]["success"] is True
        status, _, _ = await api.call("GET", "/api/v1/pop/queue/q?consumerGroup=g")
        assert status == 204


async def test_pop_and_ack_need_read_write_and_write_only_cannot_read():
    async with ApiHarness() as api:
        for token in ("acme-ro", "acme-wo"):
            status, _, body = await api.call("GET", "/api/v1/pop/queue/q", token=token)
            assert (status, body["error"]) == (403, "forbidden")
        status, _, body = await api.call("POST", "/api/v1/fetch", token="acme-wo", json={"entries": [{"queue": "q"}]})
        assert (status, body["error"]) == (403, "forbidden")
        status, _, body = await api.call("POST", "/api/v1/push", token="acme-ro", json={"items": [{"queue": "q", "payload": 1}]})
        assert (status, body["error"]) == (403, "forbidden")


async def test_long_poll_wakes_on_an_apply_without_proposing_empty_pops():
    async with ApiHarness() as api:
        group = api.groups["acme"]
        started = time.monotonic()
        waiting = asyncio.ensure_future(api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=5000"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await push(api, [{"queue": "q", "payload": "late"}])
        status, _, popped = await asyncio.wait_for(waiting, 2)
        assert status == 200 and popped["messages"][0]["payload"] == "late"
        assert time.monotonic() - started < 1.0  # woken by the apply, not by the 1 s re-check
        assert [c["op"] for c in group.writes()] == ["push", "pop"]


async def test_a_long_poll_waits_at_once_and_its_empty_answer_passes_one_barrier():
    async with ApiHarness() as api:
        group = api.groups["acme"]
        barriers, barrier = [], group.read

        async def read(fn):
            barriers.append(fn)
            return await barrier(fn)

        group.read = read
        waiting = asyncio.ensure_future(api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=5000"))
        await asyncio.sleep(0.2)
        await push(api, [{"queue": "q", "payload": "late"}])
        status, _, _ = await asyncio.wait_for(waiting, 2)
        assert status == 200 and [c["op"] for c in group.proposed] == ["push", "pop"] and barriers == []
        status, _, _ = await api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=300")
        assert status == 204 and len(barriers) == 1


async def test_a_long_poll_on_a_replica_behind_answers_empty_only_after_a_barrier():
    """An apply ends each wait (so no re-check barrier runs) while this replica does not yet show
    the message acknowledged before the call: the barrier at the wait's end finds it."""
    async with ApiHarness() as api:
        group = api.groups["acme"]
        await push(api, [{"queue": "q", "payload": "acknowledged"}])
        behind = True
        barrier = group.read

        async def read(fn):
            nonlocal behind
            behind = behind and fn.__name__ != "deliverable"
            return await barrier(fn)

        peek = group.peek_local
        group.peek_local = lambda fn: False if behind and fn.__name__ == "deliverable" else peek(fn)
        group.read = read

        async def an_apply_as_each_wait_ends(timeout_s: float, seen_generation: int) -> bool:
            await asyncio.sleep(timeout_s)
            return True

        group.signal.wait = an_apply_as_each_wait_ends
        status, _, popped = await asyncio.wait_for(api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=300"), 2)
        assert status == 200 and popped["messages"][0]["payload"] == "acknowledged"


async def test_long_poll_wakes_on_a_timer_fire():
    async with ApiHarness() as api:
        group = api.groups["acme"]
        await api.call("POST", "/api/v1/timers", json=[{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 300,
                                                         "txn": "t-k", "payload": base64.b64encode(b'"fired"').decode()}])
        waiting = asyncio.ensure_future(api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=5000"))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        group.advance(299)
        await asyncio.sleep(0.1)
        assert not waiting.done()  # not before deliverAt
        group.advance(1)
        status, _, popped = await asyncio.wait_for(waiting, 2)
        assert status == 200
        assert popped["messages"][0]["transactionId"] == "t-k" and popped["messages"][0]["payload"] == "fired"


async def test_long_poll_answers_204_after_the_timeout():
    async with ApiHarness() as api:
        started = time.monotonic()
        status, _, _ = await api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=300")
        assert status == 204
        assert 0.3 <= time.monotonic() - started < 1.5
        assert [c["op"] for c in api.groups["acme"].writes()] == []


@pytest.mark.parametrize("query", ["batch=x", "wait=maybe", "timeout=soon"])
async def test_bad_pop_query_is_400(query):
    async with ApiHarness() as api:
        status, _, body = await api.call("GET", f"/api/v1/pop/queue/q?{query}")
        assert (status, body["error"]) == (400, "bad_request")


@pytest.mark.parametrize("body", [
    {},
    {"acknowledgments": []},
    {"acknowledgments": [{"partition": "Default", "status": "completed"}]},
    {"acknowledgments": [{"partition": "Default", "offset": 0, "status": "done"}]},
    {"acknowledgments": [{"partition": "Default", "offset": -1}]},
    {"acknowledgments": [{"partition": "Default", "offset": 2**64}]},
    {"acknowledgments": [{"partition": "Default", "offset": 0}], "extra": 1},
])
async def test_bad_ack_batch_is_400(body):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/ack/batch", json=body)
        assert (status, answer["error"]) == (400, "bad_request")


async def test_fetch_validates_and_clamps():
    async with ApiHarness() as api:
        await push(api, [{"queue": "q", "payload": i} for i in range(5)])
        _, _, body = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={"entries": [
            {"queue": "q", "offset": 3, "limit": 10}, {"queue": "q", "offset": 0, "limit": 0}, {"queue": "none"}]})
        assert [[r["offset"] for r in e["records"]] for e in body["entries"]] == [[3, 4], [0], []]
        status, _, body = await api.call("POST", "/api/v1/fetch", token="acme-ro", json={"entries": [{"queue": "q", "offset": "0"}]})
        assert (status, body["error"]) == (400, "bad_request")


async def test_health_is_public_and_reports_every_group():
    async with ApiHarness() as api:
        status, _, body = await api.call("GET", "/health", token=None)
        assert status == 200 and body["status"] == "healthy" and body["node"] == "n1"
        assert set(body["groups"]) == {"acme", "globex"}
        assert set(body["groups"]["acme"]) == {"role", "leader", "term", "commitIndex", "appliedIndex", "problem",
                                               "peerLinks"}
        assert body["groups"]["acme"]["problem"] is None


async def test_unknown_route_is_a_json_404():
    async with ApiHarness() as api:
        status, _, body = await api.call("GET", "/api/v1/nothing")
        assert (status, body["error"]) == (404, "not_found")


async def test_lease_extend():
    async with ApiHarness() as api:
        await push(api, [{"queue": "q", "payload": 1}])
        _, _, popped = await api.call("GET", "/api/v1/pop/queue/q")
        status, _, body = await api.call("POST", f"/api/v1/lease/{popped['leaseId']}/extend", json={"seconds": 60})
        assert status == 200 and body["ok"] is True and body["leaseId"] == popped["leaseId"]
        status, _, body = await api.call("POST", "/api/v1/lease/nope/extend", json={"seconds": 60})
        assert (status, body["error"]) == (404, "invalid_lease")
        status, _, body = await api.call("POST", f"/api/v1/lease/{popped['leaseId']}/extend", json={"seconds": 0})
        assert (status, body["error"]) == (400, "bad_request")


@pytest.mark.parametrize("raw", [b'{"items": [{"queue": "q", "payload": NaN}]}', b"[" * 100_000])
async def test_non_json_constants_and_deep_nesting_are_400(raw):
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/push", data=raw)
        assert (status, body["error"]) == (400, "bad_request")


async def test_parked_consumers_woken_by_one_message_propose_one_pop():
    async with ApiHarness() as api:
        waiting = [asyncio.ensure_future(api.call("GET", "/api/v1/pop/queue/q?wait=true&timeout=600")) for _ in range(5)]
        await asyncio.sleep(0.1)
        await push(api, [{"queue": "q", "payload": "only"}])
        answers = await asyncio.wait_for(asyncio.gather(*waiting), 3)
        assert sorted(status for status, _, _ in answers) == [200, 204, 204, 204, 204]
        assert [c["op"] for c in api.groups["acme"].writes()] == ["push", "pop"]
        assert len(api.serving.pop_turns) == 0


async def test_an_entry_over_the_raft_cap_is_413():
    from queen_raft.raft import EntryTooLarge

    async with ApiHarness() as api:
        async def refuse(command):
            raise EntryTooLarge("entry of 9000000 bytes exceeds MAX_ENTRY_BYTES")

        api.groups["acme"].propose = refuse
        status, _, body = await push(api, [{"queue": "q", "payload": 1}])
        assert (status, body["error"]) == (413, "payload_too_large")


async def test_pop_reads_through_the_barrier_only_when_nothing_is_deliverable_here():
    """A message already applied here is popped without a read barrier first (the pop is itself an
    ordered write); an empty look takes the barrier, so a push acknowledged by another node but not
    applied here yet is still seen."""
    async with ApiHarness() as api:
        group = api.groups["acme"]
        barrier_reads = 0
        real_read = group.read

        async def counting_read(fn):
            nonlocal barrier_reads
            barrier_reads += 1
            return await real_read(fn)

        group.read = counting_read
        status, _, _ = await api.call("GET", "/api/v1/pop/queue/q")
        assert (status, barrier_reads) == (204, 1)
        await push(api, [{"queue": "q", "payload": 1, "transactionId": "t1"}])
        status, _, popped = await api.call("GET", "/api/v1/pop/queue/q")
        assert (status, barrier_reads) == (200, 1)
        assert [m["payload"] for m in popped["messages"]] == [1]
