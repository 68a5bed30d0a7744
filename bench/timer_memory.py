"""Scenario 7: memory per pending timer, on each node, beyond its payload.

Resident memory of each node before and after loading N timers due far away, divided by N, less
the payload's size; etcd the same, per member (its bbolt file is mapped, so its resident set holds
the pages of the data it touched). Redis's own used_memory (its allocator's count); PostgreSQL's
table and index size on disk (its rows live in pages, cached in shared buffers).

The headline for us is the whole resident set (VmRSS), the figure the target is set on. The details
split it (smaps_rollup): anonymous memory (the heap: state, log index, buffers) and file-backed pages
(mapped files: the Raft journal's mmap, page cache that the kernel can reclaim once clean). The
journal drops its written pages from the mapping (queen_raft/raft/journal.py), so the file-backed
share per timer is small; it is reported so that a regression there shows.
"""

from __future__ import annotations

import asyncio
import time

from bench.pending_load import load_pending
from bench.process_usage import resident_breakdown
from bench.report import ScenarioResult
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import PAYLOAD, TimerService

TIMERS = {False: 200_000, True: 20_000}
# Python frees into its own arenas and the allocator keeps pages: a pause lets the followers finish
# applying and a snapshot child exit before the second reading.
SETTLE_S = 3.0


async def peer_bytes(service: TimerService) -> int:
    client = service.client(1)
    try:
        if service.name == "redis":
            return await client.info_memory()
        return await client.table_bytes()
    finally:
        await client.close()


def measure(service: TimerService, quick: bool) -> dict:
    count = TIMERS[quick]
    time.sleep(1.0)
    per_node = service.name in (OURS, "etcd")
    if per_node:
        pids = {name: pid for name, pid in service.pids().items() if name != "sweeper"}
        breakdown_before = {node: resident_breakdown(pid) for node, pid in pids.items()}
        before = {node: kinds["rss"] for node, kinds in breakdown_before.items()}
    else:
        before = {service.name: asyncio.run(peer_bytes(service))}
    with SystemCpu(service.pids) as load_cpu:
        asyncio.run(load_pending(service, count, "mem"))
    time.sleep(SETTLE_S)
    if per_node:
        breakdown_after = {node: resident_breakdown(pid) for node, pid in pids.items()}
        after = {node: kinds["rss"] for node, kinds in breakdown_after.items()}
    else:
        after = {service.name: asyncio.run(peer_bytes(service))}
    per_timer = {k: round((after[k] - before[k]) / count - len(PAYLOAD)) for k in before}
    figures = {"timers": count, "payload_bytes": len(PAYLOAD), "before_bytes": before, "after_bytes": after,
               "bytes_per_timer_beyond_payload": per_timer,
               "load_cpu_us_per_op_all_processes": load_cpu.us_per(count)}
    if per_node:
        def grown_per_timer(kind: str) -> dict[str, int]:
            return {node: round((breakdown_after[node][kind] - breakdown_before[node][kind]) / count) for node in pids}
        figures["anonymous_bytes_per_timer_beyond_payload"] = {
            node: value - len(PAYLOAD) for node, value in grown_per_timer("anonymous").items()}
        figures["file_backed_bytes_per_timer"] = grown_per_timer("file_backed")
        figures["resident_before"], figures["resident_after"] = breakdown_before, breakdown_after
    return figures


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("timer_memory", quick)
    figure = result.figure("bytes per pending timer beyond its payload (ours: RSS per node; etcd: RSS per member; "
                           "Redis: used_memory; PostgreSQL: table+index on disk)", "B", "<= 300 (ours)")
    load_cpu = result.figure(f"load: {CPU_FIGURE_NOTE} per timer op", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick)):
        result.details[name] = figures
        load_cpu.values[name] = figures["load_cpu_us_per_op_all_processes"]
        print(f"   {name}: {figures['bytes_per_timer_beyond_payload']}", flush=True)
        if name == OURS:
            print(f"   {name} anonymous: {figures['anonymous_bytes_per_timer_beyond_payload']}, file-backed: "
                  f"{figures['file_backed_bytes_per_timer']}", flush=True)
        figure.values[name] = ", ".join(f"{k} {v}" for k, v in figures["bytes_per_timer_beyond_payload"].items()) \
            if name in (OURS, "etcd") else next(iter(figures["bytes_per_timer_beyond_payload"].values()))
    return result
