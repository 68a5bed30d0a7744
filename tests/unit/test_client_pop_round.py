"""The SDK's consumer round in one call (queen_raft/client/pop_round.py) against the real app and a
real TenantState (test_api_fake_group.py): what it sends, what it answers, and the loop."""

from __future__ import annotations

import pytest

from queen_raft.client import Batch, Queen, Settlement
from test_api_fake_group import ApiHarness
from test_client_transport import FAST


def ops(api: ApiHarness) -> list[str]:
    return [c["op"] for c in api.groups["acme"].writes()]


async def push(q: Queen, queue: str, count: int) -> None:
    for i in range(count):
        await q.push(queue, {"n": i}, txn=f"t{i}")


async def test_ack_and_pop_settles_each_as_told_then_pops_in_one_call():
    async with ApiHarness() as api, Queen(urls=[str(api.client.make_url(""))], token="acme-rw", retry=FAST) as q:
        await push(q, "jobs", 4)
        first = await q.ack_and_pop("jobs", [], group="g", batch=2)  # nothing to settle: a plain pop
        assert [m.transaction_id for m in first.messages] == ["t0", "t1"] and first.acks == []
        assert first.lease_id == first.messages[0].lease_id is not None
        settle = [first.messages[0], Settlement(first.messages[1], "retry")]
        second = await q.ack_and_pop("jobs", settle, group="g", batch=2)
        assert [(a.index, a.success) for a in second.acks] == [(0, True), (1, True)]
        # t1 went back by its retry, settled before the pop of the same call took it again.
        assert [(m.transaction_id, m.delivery_attempt) for m in second.messages] == [("t1", 2), ("t2", 1)]
        assert ops(api)[-2:] == ["ack", "pop"]
        proposed_ack = api.groups["acme"].writes()[-2]
        assert [(a["transactionId"], a["status"]) for a in proposed_ack["acknowledgments"]] == [
            ("t0", "completed"), ("t1", "retry")]


async def test_ack_and_pop_refuses_messages_of_several_pops_or_another_group_before_sending():
    async with ApiHarness() as api, Queen(urls=[str(api.client.make_url(""))], token="acme-rw", retry=FAST) as q:
        await push(q, "jobs", 2)
        [a] = await q.pop("jobs", group="g")
        [b] = await q.pop("jobs", group="h")
        sent = len(ops(api))
        with pytest.raises(ValueError, match="one lease"):
            await q.ack_and_pop("jobs", [a, b], group="g")
        with pytest.raises(ValueError, match="consumer group"):
            await q.ack_and_pop("jobs", [b], group="g")
        with pytest.raises(ValueError, match="ack status"):
            Settlement(a, "done")
        assert len(ops(api)) == sent


async def test_consume_batches_sends_each_batchs_settlements_with_the_next_pop():
    async with ApiHarness() as api, Queen(urls=[str(api.client.make_url(""))], token="acme-rw", retry=FAST) as q:
        await push(q, "jobs", 5)
        seen: list[Batch] = []
        async for batch in q.consume_batches("jobs", group="g", batch=2, wait="1s"):
            seen.append(batch)
            first = batch.messages[0]
            if (first.transaction_id, first.delivery_attempt) == ("t0", 1):
                batch.nack(first, "not yet")  # failed: it comes back, attempt 2
            batch.ack_rest()
            if len(seen) == 3:
                break
        delivered = [[(m.transaction_id, m.delivery_attempt) for m in b] for b in seen]
        assert delivered == [[("t0", 1), ("t1", 1)], [("t0", 2), ("t2", 1)], [("t3", 1), ("t4", 1)]]
        assert seen[0].previous_acks == []
        assert [(a.index, a.success) for a in seen[1].previous_acks] == [(0, True), (1, True)]
        # One GET pop, then one ack + pop call per round: never an ack call of its own.
        assert ops(api)[5:] == ["pop", "ack", "pop", "ack", "pop"]
        failed = api.groups["acme"].writes()[6]["acknowledgments"][0]
        assert (failed["transactionId"], failed["status"], failed["error"]) == ("t0", "failed", "not yet")


def test_a_batch_keeps_one_settlement_per_message_in_the_batchs_order_and_refuses_others():
    from queen_raft.client import Message

    def message(txn: str) -> Message:
        return Message.from_wire({"leaseId": "L", "transactionId": txn, "partition": "Default", "offset": 0},
                                 "q", None, None)

    a, b, c = message("a"), message("b"), message("c")
    batch = Batch([a, b], [])
    batch.nack(b, "first try")
    batch.retry(b)  # replaces the nack
    batch.ack_rest()
    assert [(s.message.transaction_id, s.status, s.error) for s in batch.settlements()] == [
        ("a", "completed", None), ("b", "retry", None)]
    with pytest.raises(ValueError, match="not a message of this batch"):
        batch.ack(c)
