"""Scenario 6: push and pop/ack throughput of the queue itself, batches of 100.

Push: 4 clients pushing 100 messages per call. Then pop/ack: one consumer taking 100 under a
lease and acknowledging them in one call, until the queue is empty or the time is up (ours leases
a whole partition to one consumer at a time, so one consumer is the fair shape for a single
partition; the peers are driven the same way).

etcd's queue is a prefix of ready keys moved to a leased prefix by a compare-and-swap Txn
(bench/peers/etcd_timers.py says how).
"""

from __future__ import annotations

import asyncio
import time

from bench.latency import summary
from bench.load_generator import closed_loop
from bench.process_usage import CpuWindow
from bench.profiler import profiled
from bench.report import ScenarioResult
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import TimerService

BATCH = 100
PUSH_CLIENTS = 4
DURATION_S = {False: 10.0, True: 3.0}


def measure(service: TimerService, quick: bool, profile: bool = False) -> dict:
    duration = DURATION_S[quick]

    async def body() -> dict:
        client = service.client(PUSH_CLIENTS)
        try:
            async def push(seq: int) -> int:
                await client.push([f"p-{seq}-{i}" for i in range(BATCH)])
                return BATCH

            cpu = CpuWindow(service.pids)
            cpu.start(time.monotonic())
            with profiled(service, "queue_push", duration, enabled=profile), SystemCpu(service.pids) as push_sum:
                pushed = await closed_loop(push, PUSH_CLIENTS, duration)
            push_cpu = cpu.stop(time.monotonic())
            taken = 0

            async def pop_ack(seq: int) -> int:
                nonlocal taken
                messages = await client.pop(BATCH)
                await client.ack(messages)
                taken += len(messages)
                return len(messages)

            cpu.start(time.monotonic())
            with profiled(service, "queue_pop_ack", duration, enabled=profile), SystemCpu(service.pids) as pop_sum:
                popped = await closed_loop(pop_ack, 1, duration)
            pop_cpu = cpu.stop(time.monotonic())
        finally:
            await client.close()
        return {
            "push": {"messages_per_s": round(pushed.ops_per_s), "call_latency_ms": summary(pushed.latencies_ms),
                     "errors": len(pushed.errors), "error_samples": pushed.errors[:3], "cpu_cores": push_cpu,
                     "cpu_us_per_message_all_processes": push_sum.us_per(pushed.ops)},
            "pop_ack": {"messages_per_s": round(popped.ops_per_s), "round_latency_ms": summary(popped.latencies_ms),
                        "messages": taken, "errors": len(popped.errors), "error_samples": popped.errors[:3],
                        "cpu_cores": pop_cpu, "cpu_us_per_message_all_processes": pop_sum.us_per(popped.ops)},
        }

    return asyncio.run(body())


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("queue_throughput", quick)
    push = result.figure("push, 4 clients x 100 per call", "messages/s")
    push_p99 = result.figure("push call latency p99", "ms")
    pop = result.figure("pop + ack, 1 consumer x 100 per round", "messages/s")
    pop_p99 = result.figure("pop + ack round latency p99", "ms")
    push_cpu = result.figure(f"push: {CPU_FIGURE_NOTE} per message", "us")
    pop_cpu = result.figure(f"pop + ack: {CPU_FIGURE_NOTE} per message", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick, profile and s.name == OURS)):
        result.details[name] = figures
        push.values[name] = figures["push"]["messages_per_s"]
        push_p99.values[name] = figures["push"]["call_latency_ms"]["p99"]
        pop.values[name] = figures["pop_ack"]["messages_per_s"]
        pop_p99.values[name] = figures["pop_ack"]["round_latency_ms"]["p99"]
        push_cpu.values[name] = figures["push"]["cpu_us_per_message_all_processes"]
        pop_cpu.values[name] = figures["pop_ack"]["cpu_us_per_message_all_processes"]
    return result
