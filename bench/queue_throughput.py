"""Scenario 6: push and pop/ack throughput of the queue itself, batches of 100.

Push: 4 clients pushing 100 messages per call. Then pop/ack: one consumer taking 100 under a
lease and acknowledging them in one call, until the queue is empty or the time is up (ours leases
a whole partition to one consumer at a time, so one consumer is the fair shape for a single
partition; the peers are driven the same way). Then the same consumer with the previous round's
ack sent with its next pop, each system in its natural single round trip (`ack_then_pop` in each
client): ours one POST pop (one Raft entry), Redis one pipeline (HDEL, then the pop script),
PostgreSQL one statement (the DELETE in a CTE of the pop's UPDATE: one transaction, one round
trip), etcd the pop's own range and Txn with the acked keys' deletes riding in that Txn (one Txn
cannot hold both: the pop's compare needs the revisions its range read). Before it, the queue is
topped up (not measured) so that it cannot run dry within the phase.

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
# Before the ack-with-pop phase the queue holds at least this many times what the pop + ack phase
# took: the phase must not run dry, and one round trip instead of two may take twice as many.
TOP_UP_FACTOR = 3


async def top_up(client, pushed: int, taken: int) -> int:
    """Pushes what the queue lacks for the next phase (TOP_UP_FACTOR); the messages pushed."""
    missing = max(0, TOP_UP_FACTOR * taken - (pushed - taken))
    calls = -(-missing // BATCH)
    for first in range(0, calls, PUSH_CLIENTS):
        await asyncio.gather(*(client.push([f"r-{seq}-{i}" for i in range(BATCH)])
                               for seq in range(first, min(calls, first + PUSH_CLIENTS))))
    return calls * BATCH


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
            topped_up = await top_up(client, pushed.ops, taken)
            held: list = []
            carried = 0
            short_rounds = 0

            async def ack_with_pop(seq: int) -> int:
                nonlocal held, carried, short_rounds
                held = await client.ack_then_pop(held, BATCH)
                carried += len(held)
                short_rounds += len(held) < BATCH
                return len(held)

            cpu.start(time.monotonic())
            with profiled(service, "queue_ack_with_pop", duration, enabled=profile), \
                    SystemCpu(service.pids) as carry_sum:
                rounds = await closed_loop(ack_with_pop, 1, duration)
            carry_cpu = cpu.stop(time.monotonic())
        finally:
            await client.close()
        return {
            "push": {"messages_per_s": round(pushed.ops_per_s), "call_latency_ms": summary(pushed.latencies_ms),
                     "errors": len(pushed.errors), "error_samples": pushed.errors[:3], "cpu_cores": push_cpu,
                     "cpu_us_per_message_all_processes": push_sum.us_per(pushed.ops)},
            "pop_ack": {"messages_per_s": round(popped.ops_per_s), "round_latency_ms": summary(popped.latencies_ms),
                        "messages": taken, "errors": len(popped.errors), "error_samples": popped.errors[:3],
                        "cpu_cores": pop_cpu, "cpu_us_per_message_all_processes": pop_sum.us_per(popped.ops)},
            "ack_with_pop": {"messages_per_s": round(rounds.ops_per_s), "round_latency_ms": summary(rounds.latencies_ms),
                             "messages": carried, "rounds_short_of_a_batch": short_rounds, "topped_up": topped_up,
                             "errors": len(rounds.errors), "error_samples": rounds.errors[:3], "cpu_cores": carry_cpu,
                             "cpu_us_per_message_all_processes": carry_sum.us_per(rounds.ops)},
        }

    return asyncio.run(body())


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("queue_throughput", quick)
    push = result.figure("push, 4 clients x 100 per call", "messages/s")
    push_p99 = result.figure("push call latency p99", "ms")
    pop = result.figure("pop + ack, 1 consumer x 100 per round", "messages/s")
    pop_p99 = result.figure("pop + ack round latency p99", "ms")
    carry = result.figure("pop carrying the previous round's ack, 1 consumer x 100 per round", "messages/s")
    carry_p99 = result.figure("pop carrying the previous round's ack: round latency p99", "ms")
    push_cpu = result.figure(f"push: {CPU_FIGURE_NOTE} per message", "us")
    pop_cpu = result.figure(f"pop + ack: {CPU_FIGURE_NOTE} per message", "us")
    carry_cpu = result.figure(f"pop carrying the previous round's ack: {CPU_FIGURE_NOTE} per message", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick, profile and s.name == OURS)):
        result.details[name] = figures
        push.values[name] = figures["push"]["messages_per_s"]
        push_p99.values[name] = figures["push"]["call_latency_ms"]["p99"]
        pop.values[name] = figures["pop_ack"]["messages_per_s"]
        pop_p99.values[name] = figures["pop_ack"]["round_latency_ms"]["p99"]
        push_cpu.values[name] = figures["push"]["cpu_us_per_message_all_processes"]
        pop_cpu.values[name] = figures["pop_ack"]["cpu_us_per_message_all_processes"]
        carry.values[name] = figures["ack_with_pop"]["messages_per_s"]
        carry_p99.values[name] = figures["ack_with_pop"]["round_latency_ms"]["p99"]
        carry_cpu.values[name] = figures["ack_with_pop"]["cpu_us_per_message_all_processes"]
    return result
