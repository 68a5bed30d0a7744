"""Scenario 8: ten million pending timers in one tenant (ours only: the peers are single processes
whose memory per timer the timer_memory scenario already measures).

Steps, on one three-node cluster:
1. load: 10,000,000 timers due in a day, in calls of 256 from 4 clients; the load rate;
2. memory: each node's resident set before and after, per timer beyond its payload;
3. fire lag at 2,000/s while they are pending (the fire_lag scenario's measure, 10 s): the pending
   count must not move the lag;
4. snapshot: GET /api/v1/admin/snapshot on the leader (fork, encode, stream), its time and size;
5. restart: a follower killed (-9) and started again: until it serves (snapshot and journal
   loaded), and until its group has applied what the leader had committed (the recovery
   scenario's measure).

The three nodes share the machine's memory: at ten million timers the memory per timer decides
whether they fit. The tenant's pending quota (2,147,483 by default) is raised for the run.
`--quick` loads 50,000; QUEEN_BENCH_PENDING sets another count (a shared machine may not load ten
million in the time it has). Throughout, bench/memory_watch.py samples the machine's available
memory and the nodes' snapshot writers (their copied pages), and stops the run if the machine falls
below 1.5 GiB available.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request

from bench import fire_lag
from bench.memory_watch import MemoryWatch
from bench.pending_load import BATCH_OPS, FAR_DELAY_MS, LOAD_CLIENTS, pending_count
from bench.process_usage import resident_breakdown
from bench.queen_service import TENANT, token
from bench.recovery import restart_queen_follower
from bench.report import ScenarioResult
from bench.systems import OURS, each_system
from bench.timer_service import PAYLOAD, ScheduleOp, TimerService

TIMERS = {False: 10_000_000, True: 50_000}
COUNT_ENV = "QUEEN_BENCH_PENDING"
# Room for the load and the fire-lag timers on top of it.
QUOTA_SETTINGS = {"timers_max_pending": 2 * TIMERS[False]}
LAG_RATE_PER_S = 2_000
LAG_DURATION_S = {False: 10.0, True: 3.0}
PROGRESS_EVERY = 1_000_000
SETTLE_S = 5.0
SNAPSHOT_TIMEOUT_S = 600.0


async def load(service: TimerService, count: int) -> float:
    """Schedules `count` timers due in a day; returns the seconds it took."""
    client = service.client(LOAD_CLIENTS)
    calls = iter(range((count + BATCH_OPS - 1) // BATCH_OPS))
    started = time.monotonic()
    done = [0]

    async def worker() -> None:
        for seq in calls:
            first = seq * BATCH_OPS
            ops = [ScheduleOp(f"ten-{i}", FAR_DELAY_MS, f"ten-{i}") for i in range(first, min(count, first + BATCH_OPS))]
            await client.schedule(ops)
            before = done[0]
            done[0] += len(ops)
            if done[0] // PROGRESS_EVERY != before // PROGRESS_EVERY:
                elapsed = time.monotonic() - started
                print(f"   loaded {done[0]:,} in {elapsed:.0f} s ({done[0] / elapsed:,.0f}/s)", flush=True)

    try:
        await asyncio.gather(*(worker() for _ in range(LOAD_CLIENTS)))
    finally:
        await client.close()
    return time.monotonic() - started


def take_snapshot(service) -> dict:
    """The leader's GET /api/v1/admin/snapshot, timed until the last byte."""
    url = service.cluster.url(service.leader()) + "/api/v1/admin/snapshot"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token(TENANT, 'admin')}"})
    started = time.monotonic()
    size = 0
    with urllib.request.urlopen(request, timeout=SNAPSHOT_TIMEOUT_S) as response:
        while chunk := response.read(1 << 20):
            size += len(chunk)
    return {"snapshot_s": round(time.monotonic() - started, 2), "snapshot_bytes": size}


def pending_count_to_load(quick: bool) -> int:
    return int(os.environ.get(COUNT_ENV) or TIMERS[quick])


def measure(service, quick: bool) -> dict:
    figures: dict = {}
    with MemoryWatch(service.pids) as watch:
        try:
            figures.update(measure_steps(service, quick))
        finally:
            figures["memory"] = watch.figures()
            print(f"   memory: {figures['memory']}", flush=True)
    return figures


def measure_steps(service, quick: bool) -> dict:
    count = pending_count_to_load(quick)
    pids = service.pids()
    before = {node: resident_breakdown(pid)["rss"] for node, pid in pids.items()}
    load_s = asyncio.run(load(service, count))
    time.sleep(SETTLE_S)
    after = {node: resident_breakdown(pid)["rss"] for node, pid in pids.items()}
    figures = {
        "timers": count, "load_s": round(load_s, 1), "load_per_s": round(count / load_s),
        "rss_after_bytes": after,
        "bytes_per_timer_beyond_payload": {n: round((after[n] - before[n]) / count - len(PAYLOAD)) for n in pids},
        "pending": asyncio.run(pending_count(service)),
    }
    print(f"   load {figures['load_per_s']:,}/s; per timer {figures['bytes_per_timer_beyond_payload']}", flush=True)
    lag, _ = fire_lag.measure_rate(service, LAG_RATE_PER_S, LAG_DURATION_S[quick], False)
    figures["fire_lag_2000"] = {key: lag[key] for key in ("end_to_end_lag_ms", "metric_lag_ms", "lost", "doubled")}
    print(f"   fire lag at 2,000/s: {figures['fire_lag_2000']}", flush=True)
    figures.update(take_snapshot(service))
    print(f"   snapshot {figures['snapshot_s']} s, {figures['snapshot_bytes']:,} B", flush=True)
    figures["restart"] = restart_queen_follower(service)
    print(f"   restart {figures['restart']}", flush=True)
    return figures


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("ten_million", quick)
    if OURS not in names:
        return result
    count = pending_count_to_load(quick)
    for name, figures in each_system((OURS,), lambda s: measure(s, quick), QUOTA_SETTINGS):
        result.details[name] = figures
        lag = figures["fire_lag_2000"]["end_to_end_lag_ms"]
        restart = figures["restart"]
        result.figure(f"load of {count:,} pending timers", "timers/s").values[name] = figures["load_per_s"]
        result.figure("memory per pending timer beyond its payload (RSS per node)", "B", "<= 300").values[name] = \
            ", ".join(f"{k} {v}" for k, v in figures["bytes_per_timer_beyond_payload"].items())
        result.figure(f"2,000/s end-to-end fire lag p99 with {count:,} pending", "ms", "<= 20").values[name] = lag["p99"]
        result.figure("2,000/s end-to-end fire lag p50", "ms").values[name] = lag["p50"]
        result.figure("snapshot (GET /api/v1/admin/snapshot)", "s").values[name] = figures["snapshot_s"]
        result.figure("restart (kill -9) of a follower: serving after", "s").values[name] = restart["serving_s"]
        result.figure("... and its group caught up after", "s").values[name] = restart["caught_up_s"]
        memory = figures["memory"]
        result.figure("snapshot writer's copied pages (Private_Dirty), peak per node", "MiB").values[name] = \
            ", ".join(f"{k} {v}" for k, v in memory["writer_private_dirty_mib"].items())
        result.figure("snapshot writers running at once, most", "").values[name] = memory["most_writers_at_once"]
        result.figure("machine's lowest available memory during the run", "GiB").values[name] = \
            memory["lowest_available_gib"]
    return result
