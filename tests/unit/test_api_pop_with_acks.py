"""POST pop: the acknowledgments of the body settled first, then the pop, over a real app and a real
TenantState (test_api_fake_group.py). That both go in one Raft entry is checked against real nodes
(tests/integration/test_pop_with_acks.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from queen_raft.raft import GroupUnavailable
from test_api_fake_group import ApiHarness


async def push(api: ApiHarness, txns: list[str], queue: str = "q") -> None:
    status, _, _ = await api.call("POST", "/api/v1/push", json={
        "items": [{"queue": queue, "payload": {"txn": t}, "transactionId": t} for t in txns]})
    assert status == 201


def acks_of(popped: dict, status: str = "completed") -> dict:
    return {"leaseId": popped["leaseId"], "acknowledgments": [
        {"partition": m["partition"], "transactionId": m["transactionId"], "status": status}
        for m in popped["messages"]]}


def ops(api: ApiHarness) -> list[str]:
    return [c["op"] for c in api.groups["acme"].writes()]


async def test_the_acks_are_settled_then_the_next_batch_is_popped_in_that_order():
    async with ApiHarness() as api:
        await push(api, ["a", "b", "c", "d"])
        _, _, first = await api.call("GET", "/api/v1/pop/queue/q?consumerGroup=g&batch=2")
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q?consumerGroup=g&batch=2", json=acks_of(first))
        assert status == 200
        assert answer["acknowledgments"] == [{"index": 0, "success": True, "dlq": False},
                                             {"index": 1, "success": True, "dlq": False}]
        assert [m["transactionId"] for m in answer["messages"]] == ["c", "d"]
        assert answer["leaseId"] == answer["messages"][0]["leaseId"] != first["leaseId"]
        assert ops(api)[-2:] == ["ack", "pop"]
        assert api.groups["acme"].writes()[-2]["consumerGroup"] == "g"  # the query's group, for the ack too


async def test_a_retry_ack_releases_its_message_to_the_pop_of_the_same_call():
    async with ApiHarness() as api:
        await push(api, ["a"])
        _, _, first = await api.call("GET", "/api/v1/pop/queue/q/partition/Default")
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q/partition/Default", json=acks_of(first, "retry"))
        assert status == 200 and answer["acknowledgments"][0]["success"] is True
        assert [(m["transactionId"], m["deliveryAttempt"]) for m in answer["messages"]] == [("a", 2)]


async def test_a_wrong_lease_is_that_items_verdict_and_the_pop_still_happens():
    async with ApiHarness() as api:
        await push(api, ["a", "b"])
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q?batch=5", json={
            "leaseId": "no-such-lease", "acknowledgments": [{"partition": "Default", "transactionId": "a"}]})
        assert status == 200
        assert answer["acknowledgments"][0]["success"] is False
        assert answer["acknowledgments"][0]["error"] == "invalid_lease"
        assert [m["transactionId"] for m in answer["messages"]] == ["a", "b"]


BAD_BODIES = {
    "no acknowledgments": {"leaseId": "l"},
    "empty acknowledgments": {"leaseId": "l", "acknowledgments": []},
    "no transactionId nor offset": {"leaseId": "l", "acknowledgments": [{"partition": "Default"}]},
    "bad status": {"leaseId": "l", "acknowledgments": [{"offset": 0, "status": "done"}]},
    "unknown field": {"leaseId": "l", "acknowledgments": [{"offset": 0}], "extra": 1},
    "too many": {"leaseId": "l", "acknowledgments": [{"offset": i} for i in range(1001)]},
    "another consumer group": {"leaseId": "l", "consumerGroup": "other", "acknowledgments": [{"offset": 0}]},
    "not an object": [{"offset": 0}],
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_a_malformed_body_is_the_ack_routes_400_and_nothing_is_proposed(case):
    async with ApiHarness() as api:
        await push(api, ["a"])
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q?consumerGroup=g", json=BAD_BODIES[case])
        assert (status, answer["error"]) == (400, "bad_request")
        assert ops(api) == ["push"]


@pytest.mark.parametrize("raw", [b"", b"{not json"])
async def test_no_body_or_not_json_is_400_and_nothing_is_proposed(raw):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q", data=raw)
        assert (status, answer["error"]) == (400, "bad_request")
        assert ops(api) == []


async def test_nothing_to_pop_answers_200_with_no_messages_and_the_verdicts_not_204():
    async with ApiHarness() as api:
        await push(api, ["a"])
        _, _, first = await api.call("GET", "/api/v1/pop/queue/q")
        started = time.monotonic()
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q?wait=true&timeout=300", json=acks_of(first))
        assert 0.3 <= time.monotonic() - started < 2.0
        assert status == 200
        assert answer == {"leaseId": None, "messages": [],
                          "acknowledgments": [{"index": 0, "success": True, "dlq": False}]}
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q", json=acks_of(first))
        assert status == 200 and answer["messages"] == [] and answer["acknowledgments"][0]["success"] is True


async def test_the_acks_are_settled_before_the_long_poll_parks():
    async with ApiHarness() as api:
        state = api.groups["acme"].state
        await push(api, ["a"])
        _, _, first = await api.call("GET", "/api/v1/pop/queue/q")
        waiting = asyncio.ensure_future(api.call("POST", "/api/v1/pop/queue/q?wait=true&timeout=5000",
                                                 json=acks_of(first, "dlq")))
        deadline = time.monotonic() + 2.0
        while not state.dlq_list() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert state.dlq_list(), "the ack was not settled while the call waits"
        assert not waiting.done()
        await push(api, ["b"])
        status, _, answer = await asyncio.wait_for(waiting, 3)
        assert status == 200
        assert [m["transactionId"] for m in answer["messages"]] == ["b"]
        assert answer["acknowledgments"] == [{"index": 0, "success": True, "dlq": True}]


async def test_an_ack_refused_before_it_was_proposed_pops_nothing():
    async with ApiHarness() as api:
        await push(api, ["a", "b"])
        _, _, first = await api.call("GET", "/api/v1/pop/queue/q")
        group = api.groups["acme"]
        real_propose = group.propose

        async def no_leader_for_acks(command: dict) -> dict:
            if command["op"] == "ack":
                raise GroupUnavailable("no_leader")
            return await real_propose(command)

        group.propose = no_leader_for_acks
        status, _, answer = await api.call("POST", "/api/v1/pop/queue/q", json=acks_of(first))
        assert (status, answer["error"]) == (503, "unavailable")
        assert ops(api) == ["push", "pop"]  # the first pop only


async def test_post_pop_needs_a_consuming_token():
    async with ApiHarness() as api:
        for token in ("acme-ro", "acme-wo"):
            status, _, answer = await api.call("POST", "/api/v1/pop/queue/q", token=token,
                                               json={"leaseId": "l", "acknowledgments": [{"offset": 0}]})
            assert (status, answer["error"]) == (403, "forbidden")
