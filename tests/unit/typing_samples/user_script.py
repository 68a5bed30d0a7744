"""A user's script: every call here must type-check under mypy --strict against the installed SDK."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from queen_raft.client import AckResult, Batch, PopRound, Queen, Settlement, TimerResult, TimerRow, TransactionResult


async def main() -> None:
    async with Queen(urls=["http://127.0.0.1:6632"], token="acme-rw-dev", connect_timeout_s=2.0) as q:
        t = q.timer("reminders").key("order-9137")
        scheduled: TimerResult = await t.delay("24h").payload({"orderId": 9137}).schedule()
        at: TimerResult = await t.at(datetime.now(timezone.utc) + timedelta(days=1)).payload(None).schedule()
        many: list[TimerResult] = await q.timer("reminders").schedule_many(
            [TimerRow(key=f"k{i}", payload=i, delay=timedelta(minutes=i + 1)) for i in range(3)])
        print(scheduled.deliver_at, at.status, len(many))
        messages = await q.pop("bookings", group="workers", wait="5s")
        verdicts: list[AckResult] = await q.ack_many(messages, "completed")
        print([v.success for v in verdicts])
        result: TransactionResult = await (q.transaction().kv.put("orders", "o1", {"state": "paid"})
                                           .timer("orders").key("o1").cancel(require_pending=True).commit())
        for item in result.results:
            if isinstance(item, TimerResult):
                print(item.status)
        round_: PopRound = await q.ack_and_pop("bookings", [Settlement(m, "failed", "busy") for m in messages],
                                               group="workers", batch=100, wait="5s")
        print([a.success for a in round_.acks], len(round_.messages))
        async for batch in q.consume_batches("bookings", group="workers", batch=100, wait="30s"):
            handled: Batch = batch
            for message in handled:
                handled.ack(message)
            break
