"""Scenario 4: failover under a steady 1,000 timers/s.

Ours: kill -9 of the tenant's leader halfway through; clients move to the surviving nodes. etcd:
kill -9 of the leader member, restarted at once (its sweeper and clients move to the surviving
members meanwhile). Redis and PostgreSQL are single servers, so their nearest event is a crash of
the server restarted at once by a supervisor. Figures: the longest gap without fires around the crash (from the fire instants in
the log, read back afterwards), and that every acknowledged timer fired exactly once (lost:
acknowledged and absent from the log; doubled: twice in it).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter

from bench.load_generator import paced_schedule
from bench.report import ScenarioResult
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import ScheduleOp, TimerService

RATE_PER_S = 1_000
DELAY_MS = 1_000
DURATION_S = {False: 20.0, True: 8.0}
# A schedule that meets the crash is retried (same key and txn: idempotent) for this long: the
# election (~0.3 s, ~2 s worst measured) or the restart must fit inside it.
RETRY_FOR_S = 15.0
RETRY_PAUSE_S = 0.05
# After the last schedule: its fires plus room for a slow new leader.
SETTLE_S = 5.0


class RetryingClient:
    """Retries a failed schedule call as a client with an idempotent write does."""

    def __init__(self, inner):
        self.inner = inner
        self.retried_calls = 0

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                return await self.inner.schedule(ops)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                self.retried_calls += 1
                await asyncio.sleep(RETRY_PAUSE_S)

    async def close(self) -> None:
        await self.inner.close()


def crash(service: TimerService) -> dict:
    """kill -9 of the leader (ours) or of the server, restarted at once (peers)."""
    if service.name == OURS:
        leader = service.leader()
        service.cluster.stop_node(leader, signal.SIGKILL)
        return {"killed": leader}
    restart_s = round(service.restart_after_crash(), 3)
    return {"killed": getattr(service, "killed_member", "server"), "restart_s": restart_s}


def measure(service: TimerService, quick: bool) -> dict:
    duration = DURATION_S[quick]
    crash_info: dict = {}
    crash_at: list[float] = []

    def crash_halfway() -> None:
        time.sleep(duration / 2)
        crash_at.append(time.time() * 1000)
        crash_info.update(crash(service))

    async def load() -> tuple:
        client = RetryingClient(service.client(8))
        try:
            run = await paced_schedule(client, RATE_PER_S, duration, DELAY_MS, "f")
            return run, client.retried_calls
        finally:
            await client.close()

    killer = threading.Thread(target=crash_halfway, daemon=True)
    # The whole run: schedules, fires, the crash, the election or restart, the catching up.
    with SystemCpu(service.pids) as cpu:
        killer.start()
        run, retried = asyncio.run(load())
        killer.join()
        time.sleep(DELAY_MS / 1000 + SETTLE_S)

    async def read_back() -> list:
        client = RetryingClient(service.client(1))
        try:
            return await client.inner.fired_log()
        finally:
            await client.close()

    log = [r for r in asyncio.run(read_back()) if r.txn.startswith("f-")]
    counts = Counter(r.txn for r in log)
    acknowledged = set(run.deliver_at)
    fire_times = sorted(r.fired_at_ms for r in log)
    gaps = [(b - a, a) for a, b in zip(fire_times, fire_times[1:])]
    crash_ms = crash_at[0] if crash_at else None
    # The gap that holds the crash: fires stop at the crash and resume after it.
    around = [(g, at) for g, at in gaps if crash_ms is not None and at <= crash_ms + RETRY_FOR_S * 1000
              and at + g >= crash_ms - 1000]
    worst_gap = max(around, default=(None, None))[0]
    normal = sorted(g for g, at in gaps if crash_ms is None or at + g < crash_ms - 1000)
    return {
        **crash_info, "rate_per_s": RATE_PER_S, "duration_s": duration,
        "acknowledged": len(acknowledged), "unacknowledged_calls": len(run.errors), "retried_calls": retried,
        "in_log": len(log), "lost": len(acknowledged - set(counts)), "doubled": sum(1 for n in counts.values() if n > 1),
        "gap_without_fires_ms": worst_gap,
        "normal_gap_p99_ms": normal[int(0.99 * (len(normal) - 1))] if normal else None,
        "cpu_us_per_timer_all_processes": cpu.us_per(len(acknowledged)),
    }


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("failover", quick)
    gap = result.figure("gap without fires across kill -9 (ours: leader; etcd: leader member, restarted at once; "
                        "Redis, PostgreSQL: server, restarted at once)", "ms",
                        "<= 2,000 (ours)")
    lost = result.figure("acknowledged timers lost", "")
    doubled = result.figure("timers doubled", "")
    cpu = result.figure(f"whole run (schedule, fire, crash, recovery): {CPU_FIGURE_NOTE} per timer", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick)):
        result.details[name] = figures
        print(f"   {name}: {figures}", flush=True)
        gap.values[name] = figures["gap_without_fires_ms"]
        lost.values[name] = figures["lost"]
        doubled.values[name] = figures["doubled"]
        cpu.values[name] = figures["cpu_us_per_timer_all_processes"]
    return result
