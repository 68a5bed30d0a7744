"""A message's identities (queue, partition, transactionId, consumer group) are names bounded by
MAX_NAME_BYTES like a timer's: beyond it 400 `bad_request` naming the field, nothing proposed, on
push, a transaction's push and ack, pop, ack, fetch and configure."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from queen_raft.state.limits import MAX_NAME_BYTES
from test_api_fake_group import ApiHarness

AT_BOUND = "\u00e9" * (MAX_NAME_BYTES // 2)  # 2 bytes a character: exactly the bound
PAST_BOUND = AT_BOUND + "x"
ONE_MB = "q" * 1_000_000


def assert_400_naming(status: int, answer: dict, field: str) -> None:
    assert (status, answer["error"]) == (400, "bad_request"), answer
    assert field in answer["message"] and str(MAX_NAME_BYTES) in answer["message"], answer


@pytest.mark.parametrize("field", ["queue", "partition", "transactionId"])
@pytest.mark.parametrize("name", [PAST_BOUND, ONE_MB], ids=["bound + 1 byte", "1 MB"])
async def test_an_over_long_push_identity_is_400_naming_the_field(field, name):
    item = {"queue": "q", "payload": 1, field: name}
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/push", json={"items": [{"queue": "q", "payload": 0}, item]})
        assert_400_naming(status, answer, field)
        status, _, answer = await api.call("POST", "/api/v1/transaction", json={"operations": [dict(item, type="push")]})
        assert (status, answer["reason"], answer["index"]) == (400, "bad_request", 0), answer
        assert field in answer["message"], answer
        assert api.groups["acme"].writes() == []


@pytest.mark.parametrize("field", ["queue", "partition", "transactionId", "consumerGroup"])
async def test_an_over_long_ack_identity_is_400_naming_the_field(field):
    ack = {"queue": "q", "partition": "Default", "transactionId": "t", "leaseId": "l", field: PAST_BOUND}
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/ack", json=ack)
        assert_400_naming(status, answer, field)
        lease = {k: ack.pop(k) for k in ("consumerGroup", "leaseId") if k in ack}
        status, _, answer = await api.call("POST", "/api/v1/ack/batch", json=dict(lease, acknowledgments=[ack]))
        assert_400_naming(status, answer, field)
        operation = dict(ack, type="ack", leaseId="l", **({"consumerGroup": lease["consumerGroup"]} if "consumerGroup" in lease else {}))
        status, _, answer = await api.call("POST", "/api/v1/transaction", json={"operations": [operation]})
        assert (status, answer["reason"], answer["index"]) == (400, "bad_request", 0), answer
        assert api.groups["acme"].writes() == []


@pytest.mark.parametrize("path, field", [
    (f"/api/v1/pop/queue/{quote(PAST_BOUND)}", "queue"),
    (f"/api/v1/pop/queue/q/partition/{quote(PAST_BOUND)}", "partition"),
    (f"/api/v1/pop/queue/q?consumerGroup={quote(PAST_BOUND)}", "consumerGroup"),
])
async def test_an_over_long_pop_identity_is_400_naming_the_field(path, field):
    async with ApiHarness() as api:
        status, _, answer = await api.call("GET", path)
        assert_400_naming(status, answer, field)
        assert api.groups["acme"].writes() == []


@pytest.mark.parametrize("field", ["queue", "partition"])
async def test_an_over_long_fetch_identity_is_400(field):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/fetch", json={"entries": [{"queue": "q", field: PAST_BOUND}]})
        assert_400_naming(status, answer, field)


async def test_an_over_long_configured_queue_is_400():
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/configure", json={"queue": PAST_BOUND, "options": {}})
        assert_400_naming(status, answer, "queue")
        assert api.groups["acme"].writes() == []


async def test_message_identities_at_the_bound_are_accepted():
    async with ApiHarness() as api:
        item = {"queue": AT_BOUND, "partition": AT_BOUND, "transactionId": AT_BOUND, "payload": 1}
        status, _, answer = await api.call("POST", "/api/v1/push", json={"items": [item]})
        assert (status, answer["results"][0]["status"]) == (201, "queued"), answer
        group = "g" * MAX_NAME_BYTES  # ASCII: three percent-encoded names would pass the URL's line limit
        path = f"/api/v1/pop/queue/{quote(AT_BOUND)}/partition/{quote(AT_BOUND)}?consumerGroup={group}"
        status, _, answer = await api.call("GET", path)
        assert status == 200 and len(answer["messages"]) == 1, answer
        ack = {"queue": AT_BOUND, "partition": AT_BOUND, "transactionId": AT_BOUND,
               "consumerGroup": group, "leaseId": answer["leaseId"]}
        status, _, answer = await api.call("POST", "/api/v1/ack", json=ack)
        assert status == 200, answer
