"""The Python SDK against three real node processes: timers, consume + ack, leases, KV, the saga."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from cluster_fixture import node_cluster, token  # noqa: F401  (node_cluster is a fixture)
from queen_raft.client import (AckRefused, Forbidden, HorizonExceeded, NotFound, PreconditionFailed, Queen,
                               TimersDisabled, TransactionRefused, Unauthorized)

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
WO = token("acme", "write-only")
# Bounds on waits for a fire or a delivery: a fire comes within ms of deliverAt on an idle cluster;
# the rest is room for a loaded 2-core machine. A test that exceeds them fails, it never hangs.
DELIVERY_TIMEOUT_S = 10.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def urls(cluster) -> list[str]:
    return [cluster.url(n) for n in cluster.node_ids]


async def test_schedule_reschedule_peek_list_cancel(node_cluster):
    queue, key = unique("reminders"), "tenant/42 order 9137"
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        timer = q.timer(queue).key(key)
        first = await timer.delay("24h").partition("p1").txn("remind-1").payload({"orderId": 9137}).schedule()
        assert (first.ok, first.status, first.txn, first.timer_key) == (True, "scheduled", "remind-1", key)
        second = await timer.delay("48h").payload({"orderId": 9137, "v": 2}).schedule()
        assert second.status == "rescheduled"
        assert second.txn != "remind-1" and second.message_id != first.message_id
        assert second.deliver_at - first.deliver_at >= 24 * 3600 * 1000 - 5_000

        peek = await timer.peek()
        assert (peek.found, peek.partition, peek.txn, peek.deliver_at) == (True, "Default", second.txn, second.deliver_at)
        assert peek.payload == {"orderId": 9137, "v": 2}

        for i in range(3):
            await q.timer(queue).key(f"k{i}").delay("1h").payload(i, zstd=True).schedule()
        page = await q.timer(queue).list(limit=2)
        assert page.truncated and [r.timer_key for r in page.rows] == ["k0", "k1"]
        assert [r.timer_key async for r in q.timer(queue).rows(page_size=2)] == ["k0", "k1", "k2", key]
        assert (await q.timer(queue).key("k1").peek()).payload == 1  # decompressed on read

        cancelled = await timer.txn(second.txn).cancel()
        assert (cancelled.ok, cancelled.status, cancelled.txn) == (True, "cancelled", second.txn)
        assert (await timer.peek()).found is False
        again = await timer.txn("look-for-me").cancel()
        assert (again.ok, again.status, again.txn) == (False, "absent", "look-for-me")


async def test_a_fired_timer_is_consumed_and_acked(node_cluster):
    queue = unique("fired")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        scheduled = await q.timer(queue).key("k").delay("300ms").payload({"hello": "world"}).schedule()

        async def first_message():
            async for message in q.consume(queue, group="workers", wait="2s"):
                return message

        message = await asyncio.wait_for(first_message(), DELIVERY_TIMEOUT_S)
        assert message.transaction_id == scheduled.txn
        assert message.message_id == scheduled.message_id
        assert message.payload == {"hello": "world"}
        assert message.created_at >= scheduled.deliver_at
        verdict = await message.ack()
        assert verdict.success is True
        assert await q.pop(queue, group="workers", wait="500ms") == []  # acked: nothing left for the group
        # A retried ack (its answer lost) gets the first verdict back and changes nothing; asking
        # for another status than the first is refused as such.
        assert (await message.ack()).success is True
        with pytest.raises(AckRefused, match="already settled as completed"):
            await message.nack("too late")
        assert await q.pop(queue, group="workers", wait="200ms") == []


async def test_keep_lease_extends_while_the_handler_runs(node_cluster):
    queue = unique("slow")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        await q.configure(queue, {"leaseTime": 2})
        await q.push(queue, {"job": 1})
        async for message in q.consume(queue, group="g", wait="2s", keep_lease="3s"):
            await asyncio.sleep(4.5)  # over twice the 2 s lease: only the renewals keep it
            assert (await message.ack()).success is True
            break
        await q.push(queue, {"job": 2})
        async for message in q.consume(queue, group="g", wait="2s"):
            await asyncio.sleep(3)  # without keep_lease the lease runs out under the handler
            with pytest.raises(AckRefused) as caught:
                await message.ack()
            assert caught.value.code == "invalid_lease"
            break


async def test_nack_redelivers_and_extend_moves_the_lease(node_cluster):
    queue = unique("jobs")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        pushed = await q.push(queue, b"\x00raw", partition="p")
        assert (await q.push(queue, b"\x00raw", partition="p", txn=pushed.transaction_id)).status == "duplicate"
        [message] = await q.pop(queue, group="g", wait="2s")
        assert (message.payload, message.partition, message.delivery_attempt) == (b"\x00raw", "p", 1)
        extended = await message.extend("120s")
        assert extended.lease_id == message.lease_id and extended.expires_at > 0
        await message.nack("handler failed")
        [again] = await q.pop(queue, group="g", wait="2s")
        assert (again.offset, again.delivery_attempt) == (message.offset, 2)
        await again.ack()
        with pytest.raises(NotFound):
            await q.extend_lease(again.lease_id, "10s")  # every message settled: the lease is gone


async def test_kv_get_put_incr_check_delete(node_cluster):
    ns = unique("ns")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        kv = q.kv(ns)
        assert (await kv.get("a")).found is False
        put = await kv.put("a", {"state": "held"}, ttl="7d")
        assert (put.found, put.version, put.value) == (True, 1, {"state": "held"})
        assert put.expires_at is not None
        got = await kv.get("a")
        assert (got.value, got.version, got.expires_at) == ({"state": "held"}, 1, put.expires_at)
        assert (await kv.incr("n", by=5)).value == 5
        assert (await kv.incr("n")).value == 6
        await kv.check("a", 1)
        with pytest.raises(PreconditionFailed):
            await kv.check("a", 7)
        with pytest.raises(PreconditionFailed):
            await kv.put_if_absent("a", 1)
        assert (await kv.delete("a")).found is True
        assert (await kv.get("a")).found is False


async def test_refusals_are_typed(node_cluster):
    async with Queen(urls=urls(node_cluster), token=WO) as q:
        await q.timer(unique("q")).key("k").delay("1s").payload(1).schedule()  # write-only may schedule
        with pytest.raises(Forbidden) as caught:
            await q.timer("q").key("k").cancel()  # and may not cancel
        assert (caught.value.status, caught.value.code) == (403, "forbidden")
        with pytest.raises(HorizonExceeded):
            await q.timer("q").key("k").delay("91d").payload(1).schedule()
    async with Queen(urls=urls(node_cluster), token="nobody") as q:
        with pytest.raises(Unauthorized):
            await q.timer("q").key("k").peek()


async def _held_booking(q: Queen, queue: str, booking: str):
    """A booking request delivered to the saga's consumer: pushed, then popped under a lease."""
    await q.push(queue, {"type": "hold", "bookingId": booking}, partition=booking)
    [message] = await q.pop(queue, group="bookings", partition=booking, wait="2s")
    return message


async def test_saga_ack_kv_put_and_timer_schedule_commit_together(node_cluster):
    """The saga: enter the `held` state in the transaction that acks the request."""
    queue, booking = unique("bookings"), unique("b")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        message = await _held_booking(q, queue, booking)
        result = await (q.transaction()
                        .ack(message, "completed", consumer_group="bookings")
                        .kv.put("bookings", booking, {"state": "held"}, ttl="7d")
                        .timer(queue).key(booking).partition(booking).delay("15m")
                        .payload({"type": "hold-expired", "bookingId": booking}).schedule()
                        .commit())
        assert len(result.results) == 3
        assert (await q.kv("bookings").get(booking)).value == {"state": "held"}
        timer = await q.timer(queue).key(booking).peek()
        assert (timer.found, timer.partition, timer.payload) == (True, booking, {"type": "hold-expired", "bookingId": booking})
        assert await q.pop(queue, group="bookings", partition=booking, wait="300ms") == []  # acked


async def test_saga_rollback_leaves_none_of_them(node_cluster):
    queue, booking = unique("bookings"), unique("b")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        message = await _held_booking(q, queue, booking)
        await q.kv("bookings").put(f"{booking}-guard", "v1")
        transaction = (q.transaction()
                       .ack(message, "completed", consumer_group="bookings")
                       .kv.put("bookings", booking, {"state": "held"}, ttl="7d")
                       .timer(queue).key(booking).partition(booking).delay("15m")
                       .payload({"type": "hold-expired", "bookingId": booking}).schedule()
                       .kv.check("bookings", f"{booking}-guard", 2))  # the guard is at version 1: refused
        with pytest.raises(TransactionRefused) as caught:
            await transaction.commit()
        assert caught.value.reason == "kv_precondition"
        assert (await q.kv("bookings").get(booking)).found is False
        assert (await q.timer(queue).key(booking).peek()).found is False
        # The ack was rolled back too: the lease still covers the message, so it acks now, once.
        assert (await message.ack()).success is True


async def test_a_cancel_inside_a_rolled_back_transaction_keeps_the_timer(node_cluster):
    queue = unique("q")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        await q.timer(queue).key("k").delay("1h").payload(1).schedule()
        with pytest.raises(TransactionRefused):
            await q.transaction().timer(queue).key("k").cancel().kv.check("ns", unique("absent"), 3).commit()
        assert (await q.timer(queue).key("k").peek()).found is True
        await q.transaction().timer(queue).key("k").cancel().commit()
        assert (await q.timer(queue).key("k").peek()).found is False


async def test_a_message_past_its_retries_is_dead_lettered_and_replayed(node_cluster):
    queue = unique("dlq")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        await q.configure(queue, {"retryLimit": 0})
        pushed = await q.push(queue, {"poison": True})
        [message] = await q.pop(queue, group="g", wait="2s")
        assert (await message.nack("cannot parse")).dlq is True
        [row] = await q.dlq(queue)
        assert (row.queue, row.transaction_id, row.error, row.payload) == (queue, pushed.transaction_id, "cannot parse",
                                                                           {"poison": True})
        replayed = await q.replay(row.dlq_id)
        assert replayed.status == "queued"
        assert await q.dlq(queue) == []
        [again] = await q.pop(queue, group="g", wait="2s")
        assert (again.message_id, again.payload) == (replayed.message_id, {"poison": True})
        with pytest.raises(NotFound):
            await q.replay(row.dlq_id)


async def test_an_operator_pause_refuses_schedules_but_not_cancels(node_cluster):
    queue = unique("paused")
    admin = token("globex", "admin")  # another tenant: the pause cannot touch the other tests
    async with Queen(urls=urls(node_cluster), token=admin) as q:
        await q.timer(queue).key("k").delay("1h").payload(1).schedule()
        assert await q.pause_scheduling() is True
        try:
            with pytest.raises(TimersDisabled) as caught:
                await q.timer(queue).key("k2").delay("1h").payload(1).schedule()
            assert caught.value.retry_after_s >= 1
            assert (await q.timer(queue).key("k").cancel()).status == "cancelled"
            assert (await q.usage()).scheduling_paused is True
        finally:
            assert await q.resume_scheduling() is False
        assert (await q.timer(queue).key("k2").delay("1h").payload(1).schedule()).status == "scheduled"
        assert (await q.usage()).billed_messages >= 2


@pytest.mark.parametrize("key", ["a/../b", "./x", "50% off?#frag", "ünï/cödé", "trailing/"])
async def test_keys_that_need_escaping_address_the_same_timer(node_cluster, key):
    queue = unique("keys")
    async with Queen(urls=urls(node_cluster), token=RW) as q:
        await q.timer(queue).key(key).delay("1h").payload(key).schedule()
        assert [row.timer_key async for row in q.timer(queue).rows()] == [key]
        peek = await q.timer(queue).key(key).peek()
        assert (peek.found, peek.timer_key, peek.payload) == (True, key, key)
        assert (await q.timer(queue).key(key).cancel()).status == "cancelled"
        assert (await q.timer(queue).key(key).peek()).found is False
