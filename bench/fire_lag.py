"""Scenario 2: fire lag at a steady 200, 2,000 and 10,000 timers/s.

Two ways: the metric (the fire's instant on the group clock minus deliverAt: the fired message's
createdAt is the tick entry's now; for the peers, the poller's or sweeper's instant) and end to end (a
long-polling consumer process's receipt instant minus deliverAt, both on this host's clock;
deliverAt comes from the schedule answer). For ours the leader's /metrics histogram is read too,
as a cross-check of the metric (bucket-interpolated, so coarser). Plus the CPU each process used.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import Counter

from bench.consumer_process import ConsumerProcess
from bench.latency import histogram_quantile, summary
from bench.load_generator import PACE_PERIOD_S, paced_schedule
from bench.plots import fire_lag_over_time
from bench.process_usage import CpuWindow
from bench.profiler import profiled
from bench.report import ScenarioResult, repo_relative, results_dir, today
from bench.schedule_throughput import entries_per_call, raft_commit_index
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import TimerService

RATES_PER_S = (200, 2_000, 10_000)
# Each timer is due this long after it is sent: long enough that the schedule call has answered
# (so deliverAt is known) before it fires, short enough to keep a run short.
DELAY_MS = 1_000
DURATION_S = {False: 10.0, True: 3.0}
# After the last schedule, how long the consumer may still wait for the last fires.
DRAIN_MARGIN_S = 30.0
TENANT_LABEL = 'tenant="acme"'
FIRE_LAG_HISTOGRAM = "queen_timers_fire_lag_seconds"


def expected_count(rate: int, duration_s: float) -> int:
    per_call = max(1, round(rate * PACE_PERIOD_S))
    period_s = per_call / rate
    return math.ceil(duration_s / period_s - 1e-9) * per_call


def measure_rate(service: TimerService, rate: int, duration_s: float, profile: bool) -> tuple[dict, list]:
    metrics_before = service.histogram(service.leader(), FIRE_LAG_HISTOGRAM, TENANT_LABEL) if service.name == OURS else []
    expected = expected_count(rate, duration_s)
    prefix = f"r{rate}-"
    consumer = ConsumerProcess(service.endpoint, expected, time.time() + duration_s + DELAY_MS / 1000 + DRAIN_MARGIN_S,
                               prefix)
    consumer.start()
    # The consumer and this load generator share the same two cores: their CPU is shown too.
    cpu = CpuWindow(lambda: {**service.pids(), "consumer": consumer.pid, "load-generator": os.getpid()})

    async def schedule() -> object:
        client = service.client(8)
        try:
            return await paced_schedule(client, rate, duration_s, DELAY_MS, prefix.rstrip("-"))
        finally:
            await client.close()

    commit_before = raft_commit_index(service)
    cpu.start(time.monotonic())
    with profiled(service, f"fire_lag_{rate}", duration_s, enabled=profile), SystemCpu(service.pids) as system_cpu:
        run = asyncio.run(schedule())
        # The window covers the fires of the last timers too.
        time.sleep(DELAY_MS / 1000)
    cpu_used = cpu.stop(time.monotonic())
    commit_after = raft_commit_index(service)
    receipts = consumer.result()
    deliver_at = run.deliver_at
    counts = Counter(txn for txn, _, _ in receipts)
    metric_lags, e2e_lags, points = [], [], []
    first_deliver = min(deliver_at.values()) if deliver_at else 0
    seen = set()
    for txn, fired_at, received_at in receipts:
        if txn in seen or txn not in deliver_at:
            continue
        seen.add(txn)
        due = deliver_at[txn]
        metric_lags.append(fired_at - due)
        e2e_lags.append(received_at - due)
        points.append(((due - first_deliver) / 1000, received_at - due))
    figures = {
        "rate_per_s": rate, "duration_s": duration_s, "scheduled": run.scheduled, "schedule_errors": len(run.errors),
        "error_samples": run.errors[:3], "generator_behind_periods": run.behind,
        "received": len(seen), "lost": len(set(deliver_at) - seen),
        "doubled": sum(1 for n in counts.values() if n > 1),
        "metric_lag_ms": summary(metric_lags), "end_to_end_lag_ms": summary(e2e_lags),
        "cpu_cores": cpu_used, "cpu_us_per_timer_all_processes": system_cpu.us_per(run.scheduled),
    }
    if service.name == OURS:
        # Log entries per timer: its schedule (shared by the calls of an entry), the tick that fires
        # it (shared by the timers due together) and the consumer's pops and barriers.
        figures["raft_entries_per_timer"] = entries_per_call(commit_before, commit_after, run.scheduled)
        after = service.histogram(service.leader(), FIRE_LAG_HISTOGRAM, TENANT_LABEL)
        before = dict(metrics_before)
        delta = [(le, count - before.get(le, 0.0)) for le, count in after]
        figures["metrics_histogram_ms"] = {
            "p50": _ms(histogram_quantile(delta, 0.5)), "p99": _ms(histogram_quantile(delta, 0.99)),
            "count": int(delta[-1][1]) if delta else 0}
    return figures, points


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("fire_lag", quick)
    series: dict[int, dict[str, list]] = {rate: {} for rate in RATES_PER_S}

    def measure(service: TimerService) -> dict:
        per_rate = {}
        for rate in RATES_PER_S:
            figures, points = measure_rate(service, rate, DURATION_S[quick], profile and service.name == OURS)
            per_rate[str(rate)] = figures
            series[rate][service.name] = points
            print(f"   {service.name} {rate}/s: e2e {figures['end_to_end_lag_ms']} lost {figures['lost']} "
                  f"doubled {figures['doubled']} cpu {figures['cpu_cores']}", flush=True)
        return per_rate

    for name, per_rate in each_system(names, measure):
        result.details[name] = per_rate
        for rate in RATES_PER_S:
            figures = per_rate[str(rate)]
            e2e, metric = figures["end_to_end_lag_ms"], figures["metric_lag_ms"]
            target_p50 = "<= 15 (ours)" if rate == 2_000 else ""
            target_p99 = "<= 40 (ours)" if rate == 2_000 else ""
            result.figure(f"{rate:,}/s end-to-end lag p50", "ms", target_p50).values[name] = e2e["p50"]
            result.figure(f"{rate:,}/s end-to-end lag p99", "ms", target_p99).values[name] = e2e["p99"]
            result.figure(f"{rate:,}/s end-to-end lag max", "ms").values[name] = e2e["max"]
            result.figure(f"{rate:,}/s fire lag (metric: fire instant - deliverAt) p50", "ms").values[name] = metric["p50"]
            result.figure(f"{rate:,}/s fire lag (metric) p99", "ms").values[name] = metric["p99"]
            cpu = figures["cpu_cores"]
            total = {}
            for process, cores in cpu.items():
                key = process.split("/", 1)[0]
                total[key] = round(total.get(key, 0.0) + (cores or 0.0), 2)
            result.figure(f"{rate:,}/s CPU per process", "cores").values[name] = ", ".join(f"{k} {v}" for k, v in total.items())
            result.figure(f"{rate:,}/s schedule + fire: {CPU_FIGURE_NOTE} per timer", "us").values[name] = \
                figures["cpu_us_per_timer_all_processes"]
            result.figure(f"{rate:,}/s timers lost", "").values[name] = figures["lost"]
            result.figure(f"{rate:,}/s timers doubled", "").values[name] = figures["doubled"]
    png = results_dir(quick) / f"{today()}-fire_lag.png"
    fire_lag_over_time(series, png)
    result.plots.append(str(repo_relative(png)))
    return result
