"""Scenario 1: schedule throughput through the client API.

Single-op calls from 32 concurrent clients (calls/s, p50/p99 latency), then batches of 256 ops
(timer ops/s). The timers are due in an hour, so no fire competes with the schedules.
"""

from __future__ import annotations

import asyncio
import time
from itertools import repeat

from bench.keepalive_client import KeepAliveScheduleClient
from bench.latency import summary
from bench.load_generator import closed_loop
from bench.process_usage import CpuWindow
from bench.profiler import profiled
from bench.report import ScenarioResult
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import ScheduleOp, TimerService

SINGLE_OP_CLIENTS = 32           # the client count of the round-2 targets
BATCH_OPS = 256                  # QUEEN_TIMERS_MAX_OPS_PER_CALL: the largest batch one call takes
BATCH_KEY_SUFFIXES = tuple(f"-{i}" for i in range(BATCH_OPS))
# Batches in flight at once: enough to keep the leader's pipeline full (one batch is one entry).
BATCH_CLIENTS = 4
FAR_DELAY_MS = 3_600_000


def raft_commit_index(service: TimerService) -> int | None:
    """Ours only: the leader's commit index, to count the log entries a phase wrote (with proposal
    batching, several single-op calls share one entry)."""
    status_of = getattr(service, "group_status", None)
    if status_of is None:
        return None
    status = status_of(service.leader()) or {}
    return status.get("commitIndex")


def entries_per_call(before: int | None, after: int | None, calls: int) -> float | None:
    if before is None or after is None or not calls:
        return None
    return round((after - before) / calls, 3)
DURATION_S = {False: 10.0, True: 3.0}  # per phase: full, --quick


def measure(service: TimerService, quick: bool, profile: bool) -> dict:
    duration = DURATION_S[quick]

    async def body() -> dict:
        # Ours is driven by a lean keep-alive HTTP client (bench/keepalive_client.py), as the peers
        # are by their own native clients: the generator shares the two cores with the servers.
        client = KeepAliveScheduleClient(service.endpoint) if service.name == OURS else service.client(SINGLE_OP_CLIENTS)
        try:
            async def single(seq: int) -> int:
                await client.schedule([ScheduleOp(f"s-{seq}", FAR_DELAY_MS, f"s-{seq}")])
                return 1

            async def batch(seq: int) -> int:
                # The same keys as f"b-{seq}-{i}" (the key is the txn too), built from prebuilt
                # suffixes with one str per op: the generator shares the two cores with the nodes.
                keys = [f"b-{seq}" + suffix for suffix in BATCH_KEY_SUFFIXES]
                ops = list(map(ScheduleOp, keys, repeat(FAR_DELAY_MS), keys))
                await client.schedule(ops)
                return BATCH_OPS

            await closed_loop(single, SINGLE_OP_CLIENTS, min(1.0, duration / 3))  # warm-up: connections, caches
            cpu = CpuWindow(service.pids)
            cpu.start(time.monotonic())
            commit_before = raft_commit_index(service)
            with profiled(service, "schedule_single", duration, enabled=profile), SystemCpu(service.pids) as single_sum:
                single_run = await closed_loop(single, SINGLE_OP_CLIENTS, duration)
            single_cpu = cpu.stop(time.monotonic())
            single_entries = entries_per_call(commit_before, raft_commit_index(service), single_run.calls)
            cpu.start(time.monotonic())
            with profiled(service, "schedule_batch", duration, enabled=profile), SystemCpu(service.pids) as batch_sum:
                batch_run = await closed_loop(batch, BATCH_CLIENTS, duration)
            batch_cpu = cpu.stop(time.monotonic())
        finally:
            await client.close()
        return {
            "single_op": {"clients": SINGLE_OP_CLIENTS, "calls_per_s": round(single_run.calls_per_s),
                          "latency_ms": summary(single_run.latencies_ms), "errors": len(single_run.errors),
                          "error_samples": single_run.errors[:3], "cpu_cores": single_cpu,
                          "raft_entries_per_call": single_entries,
                          "cpu_us_per_call_all_processes": single_sum.us_per(single_run.calls)},
            "batched": {"clients": BATCH_CLIENTS, "ops_per_call": BATCH_OPS, "ops_per_s": round(batch_run.ops_per_s),
                        "calls_per_s": round(batch_run.calls_per_s, 1), "latency_ms": summary(batch_run.latencies_ms),
                        "errors": len(batch_run.errors), "error_samples": batch_run.errors[:3], "cpu_cores": batch_cpu,
                        "cpu_us_per_op_all_processes": batch_sum.us_per(batch_run.ops)},
        }

    return asyncio.run(body())


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("schedule_throughput", quick)
    calls = result.figure("single-op schedule, 32 clients", "calls/s", ">= 3,000 (ours)")
    p50 = result.figure("single-op schedule latency p50", "ms")
    p99 = result.figure("single-op schedule latency p99", "ms", "< 20 (ours)")
    batched = result.figure("batched schedule (256 ops/call)", "timer ops/s", ">= 50,000 (ours)")
    batch_p99 = result.figure("batched call latency p99", "ms")
    single_cpu = result.figure(f"single-op schedule: {CPU_FIGURE_NOTE} per call", "us")
    batch_cpu = result.figure(f"batched schedule: {CPU_FIGURE_NOTE} per timer op", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick, profile and s.name == OURS)):
        result.details[name] = figures
        calls.values[name] = figures["single_op"]["calls_per_s"]
        p50.values[name] = figures["single_op"]["latency_ms"]["p50"]
        p99.values[name] = figures["single_op"]["latency_ms"]["p99"]
        batched.values[name] = figures["batched"]["ops_per_s"]
        batch_p99.values[name] = figures["batched"]["latency_ms"]["p99"]
        single_cpu.values[name] = figures["single_op"]["cpu_us_per_call_all_processes"]
        batch_cpu.values[name] = figures["batched"]["cpu_us_per_op_all_processes"]
    return result
