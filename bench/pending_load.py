"""Loading many pending timers (due far away) as fast as the system takes them: the set-up of the
recovery and memory scenarios."""

from __future__ import annotations

import asyncio

from bench.timer_service import ScheduleOp, TimerService

BATCH_OPS = 256
LOAD_CLIENTS = 4
# Due in a day: nothing fires while the scenario looks at memory or restarts.
FAR_DELAY_MS = 86_400_000


async def load_pending(service: TimerService, count: int, prefix: str) -> None:
    client = service.client(LOAD_CLIENTS)
    calls = iter(range((count + BATCH_OPS - 1) // BATCH_OPS))

    async def worker() -> None:
        for seq in calls:
            first = seq * BATCH_OPS
            ops = [ScheduleOp(f"{prefix}-{i}", FAR_DELAY_MS, f"{prefix}-{i}")
                   for i in range(first, min(count, first + BATCH_OPS))]
            await client.schedule(ops)

    try:
        await asyncio.gather(*(worker() for _ in range(LOAD_CLIENTS)))
    finally:
        await client.close()


async def pending_count(service: TimerService) -> int:
    client = service.client(1)
    try:
        return await client.pending()
    finally:
        await client.close()
