"""The two shapes of load the scenarios send: as fast as N clients can (closed loop), and a steady
rate of timers (open loop, paced by the clock, not by the answers)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from bench.timer_service import ScheduleOp, TimerClient

# A paced run sends one schedule call per period, holding rate * period timers (with deliverAt
# spread evenly inside the period). 20 ms keeps a call under the 256-op cap up to 12,800/s.
PACE_PERIOD_S = 0.02
# Calls of a paced run still unanswered when the next is due are not waited for; past this many
# the generator is behind and says so instead of queueing without bound.
MAX_PACED_IN_FLIGHT = 64


@dataclass
class ClosedLoopRun:
    calls: int = 0
    ops: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s else 0.0


async def closed_loop(call: Callable[[int], Awaitable[int]], concurrency: int, duration_s: float) -> ClosedLoopRun:
    """`concurrency` workers each calling call(seq) back to back for duration_s; call returns the
    number of operations it carried. Calls that start before the end are finished and counted."""
    run = ClosedLoopRun()
    sequence = itertools.count()
    started = time.perf_counter()
    end = started + duration_s

    async def worker() -> None:
        while time.perf_counter() < end:
            seq = next(sequence)
            t0 = time.perf_counter()
            try:
                ops = await call(seq)
            except Exception as exc:  # counted and shown: a benchmark that hides errors lies
                run.errors.append(repr(exc)[:300])
                continue
            run.latencies_ms.append((time.perf_counter() - t0) * 1000)
            run.calls += 1
            run.ops += ops

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.elapsed_s = time.perf_counter() - started
    return run


@dataclass
class PacedRun:
    deliver_at: dict[str, int] = field(default_factory=dict)  # txn -> deliverAt (ms) from the answer
    scheduled: int = 0
    errors: list[str] = field(default_factory=list)
    behind: int = 0  # periods skipped because MAX_PACED_IN_FLIGHT calls were still out
    elapsed_s: float = 0.0


async def paced_schedule(client: TimerClient, rate_per_s: float, duration_s: float, delay_ms: int,
                         prefix: str, on_period: Callable[[float], None] | None = None) -> PacedRun:
    """Schedules rate_per_s timers for duration_s, each due delay_ms after it is sent."""
    run = PacedRun()
    per_call = max(1, round(rate_per_s * PACE_PERIOD_S))
    period_s = per_call / rate_per_s
    in_flight: set[asyncio.Task] = set()
    serial = itertools.count()
    started = time.perf_counter()

    async def send(ops: list[ScheduleOp]) -> None:
        try:
            answers = await client.schedule(ops)
        except Exception as exc:
            run.errors.append(repr(exc)[:300])
            return
        for op, at in zip(ops, answers):
            run.deliver_at[op.txn] = at
        run.scheduled += len(ops)

    slot = 0
    while True:
        due = started + slot * period_s
        if due - started >= duration_s:
            break
        pause = due - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        if on_period is not None:
            on_period(time.perf_counter() - started)
        if len(in_flight) >= MAX_PACED_IN_FLIGHT:
            run.behind += 1
        else:
            ops = []
            for i in range(per_call):
                n = next(serial)
                # Spread deliverAt inside the period, as independent clients would.
                ops.append(ScheduleOp(f"{prefix}-{n}", delay_ms + int(i * period_s * 1000 / per_call), f"{prefix}-{n}"))
            task = asyncio.create_task(send(ops))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        slot += 1
    if in_flight:
        await asyncio.gather(*in_flight)
    run.elapsed_s = time.perf_counter() - started
    return run
