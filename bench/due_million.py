"""Scenario 3: a million timers due at the same instant.

Load them all (batches of 256) with one deliverAt T far enough ahead that the load ends first, then
watch the drain: fires/s, the lag of each fire (fire instant - T) against how many fired before it
(it must rise linearly: a steady drain, no stall, no acceleration from skipping), and afterwards
the log holds exactly the scheduled txns, each once (read back through /api/v1/fetch for ours, the
stream and the table for the peers). Peak resident memory of every process.

Ours runs twice: with the default settings, whose drain ceiling is QUEEN_RAFT_TIMER_FIRE_BATCH_MAX /
QUEEN_RAFT_TIMER_MIN_GAP_MS = 4,096 / 5 ms (the adaptive fire batch doubles from 256 during the
backlog; docs/spec.md section 2 fixes those defaults), and with TUNED_SETTINGS, a larger base fire
batch per tick entry. Each gets its own rows in the table; the tuned rows name the setting. The
drain's CPU, summed over the system's processes, is reported per fire.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from bench.latency import summary
from bench.plots import drain_lag_curve
from bench.process_usage import children_of, peak_rss_bytes
from bench.profiler import profiled
from bench.report import ScenarioResult, repo_relative, results_dir, today
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import ScheduleOp, TimerService

TIMERS = {False: 1_000_000, True: 20_000}
BATCH_OPS = 256
LOAD_CLIENTS = 4
# The load rate is measured on a first slice; T is set so that the rest of the load, at a rate
# this many times slower than measured, still ends before T (a loaded machine slows down, and a
# state growing to a million, with its snapshot writers, loads slower than the first slice: 1.5
# was once too little, and a schedule then arrived after its own due instant). A larger allowance
# only waits longer before T.
CALIBRATION_SHARE = 0.05
LOAD_SLOWDOWN_ALLOWANCE = 2.5
LOAD_MARGIN_S = 3.0
# The drain is watched until nothing is pending, for at most this long (60,000 fires/s would take
# 17 s for a million; a broken drain must end the run, not hang it).
DRAIN_TIMEOUT_S = {False: 300.0, True: 60.0}
PENDING_POLL_S = 0.2
# Counting what is pending walks the whole set on etcd and PostgreSQL (its cost grows with the set):
# the watcher spends at most this share of its time counting (it waits 1 / share times as long as
# the last count took), so its reads do not take the cores the drain needs. The fire rate comes from the fire instants, not from this poll.
POLL_COST_SHARE = 0.1
LINEAR_FIT_MIN_R2 = 0.98
# The tuned configuration for backlog-heavy tenants (cluster_configs/README.md names the setting):
# 2048 timers per tick entry lifts the ceiling to 2048 / 5 ms = 409,600 fires/s, so the cluster's
# own apply and replication cost sets the rate. 2048 drained fastest, with a straight lag curve;
# 4096 was slower and less straight (figures in cluster_configs/README.md). A 2048-timer entry fires at most
# MAX_FIRE_BYTES (4 MiB) of payload like any other and applies in a few ms per replica, far inside
# the election timeout.
TUNED_SETTINGS = {"timer_fire_batch": 2048}
TUNED_LABEL = ", ".join(f"{name}={value}" for name, value in TUNED_SETTINGS.items())


def linear_fit(points: list[tuple[float, float]]) -> dict:
    """Least squares lag = a + b * index, and R^2: how straight the lag curve is."""
    n = len(points)
    if n < 3:
        return {"slope_ms_per_1000": None, "r2": None}
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    syy = sum((y - mean_y) ** 2 for _, y in points)
    slope = sxy / sxx if sxx else 0.0
    r2 = (sxy * sxy) / (sxx * syy) if sxx and syy else 1.0
    return {"slope_ms_per_1000": round(slope * 1000 * 1000, 3), "r2": round(r2, 4)}


def fire_batches(fire_times: list[int]) -> dict:
    """The fires of one batch share its instant (our tick entry's now, the Redis script's or the
    PostgreSQL transaction's clock): how many batches, how big, how far apart. A drain whose
    batches are proposed one after the other runs at batch size / interval."""
    sizes: list[int] = []
    instants: list[int] = []
    for at in fire_times:
        if instants and instants[-1] == at:
            sizes[-1] += 1
        else:
            instants.append(at)
            sizes.append(1)
    intervals = [b - a for a, b in zip(instants, instants[1:])]
    return {"batches": len(instants), "fires_per_batch": summary(sizes, 1), "interval_ms": summary(intervals, 1)}


def batch_interval(figures: dict) -> str | None:
    """p50, p99 and mean of the interval between fire batches; the fire instants are whole ms."""
    interval = figures["fire_batches"]["interval_ms"]
    if not interval.get("count"):
        return None
    return f"p50 {interval['p50']:g}, p99 {interval['p99']:g}, mean {interval['mean']:g}"


def peak_memory(service: TimerService) -> dict[str, int]:
    peaks: dict[str, int] = {}
    for name, pid in service.pids().items():
        if name in ("poller", "sweeper"):
            continue
        key = name.split("/", 1)[0]
        try:
            total = peak_rss_bytes(pid)
            if name == "postgres":  # the postmaster's backends hold the rows they touched
                total += sum(peak_rss_bytes(child) for child in children_of(pid))
        except FileNotFoundError:
            continue
        peaks[key] = max(peaks.get(key, 0), total)
    return peaks


def measure(service: TimerService, quick: bool, profile: bool) -> tuple[dict, list]:
    count = TIMERS[quick]

    async def load() -> dict:
        client = service.client(LOAD_CLIENTS)
        try:
            calibration_calls = max(1, int(count * CALIBRATION_SHARE) // BATCH_OPS)
            calls_total = (count + BATCH_OPS - 1) // BATCH_OPS
            deliver_at_target = None
            deliver_at: dict[str, int] = {}

            def batch_ops(seq: int) -> list[ScheduleOp]:
                first = seq * BATCH_OPS
                now_ms = int(time.time() * 1000)
                return [ScheduleOp(f"m-{i}", deliver_at_target - now_ms, f"m-{i}")
                        for i in range(first, min(count, first + BATCH_OPS))]

            # Calibration: the same calls, into keys due a day later (they stay pending, apart).
            async def calibrate(seq: int) -> None:
                ops = [ScheduleOp(f"cal-{seq}-{i}", 86_400_000, f"cal-{seq}-{i}") for i in range(BATCH_OPS)]
                await client.schedule(ops)

            started = time.perf_counter()
            await _each_call(calibration_calls, calibrate)
            rate = calibration_calls * BATCH_OPS / max(1e-6, time.perf_counter() - started)
            load_s = count / rate * LOAD_SLOWDOWN_ALLOWANCE + LOAD_MARGIN_S
            deliver_at_target = int(time.time() * 1000 + load_s * 1000)

            async def load_call(seq: int) -> None:
                ops = batch_ops(seq)
                answers = await client.schedule(ops)
                for op, at in zip(ops, answers):
                    deliver_at[op.txn] = at

            load_started = time.perf_counter()
            with SystemCpu(service.pids) as load_cpu:
                await _each_call(calls_total, load_call)
            load_elapsed = time.perf_counter() - load_started
            return {"deliver_at": deliver_at, "target_ms": deliver_at_target, "calibration_ops_per_s": round(rate),
                    "load_ops_per_s": round(count / load_elapsed),
                    "load_cpu_us_per_op_all_processes": load_cpu.us_per(count), "load_ended_before_target_s":
                    round(deliver_at_target / 1000 - time.time(), 2)}
        finally:
            await client.close()

    loaded = asyncio.run(load())
    deliver_at = loaded.pop("deliver_at")
    target_ms = loaded["target_ms"]

    drain_cpu = SystemCpu(service.pids)

    async def drain_and_read() -> tuple[float | None, list]:
        client = service.client(1)
        try:
            wait_s = target_ms / 1000 - time.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            deadline = time.monotonic() + DRAIN_TIMEOUT_S[quick]
            drained_after = None
            with profiled(service, "due_million_drain", DRAIN_TIMEOUT_S[quick], enabled=profile), drain_cpu:
                while time.monotonic() < deadline:
                    asked = time.perf_counter()
                    # Calibration timers stay pending, due a day later: count only ours.
                    if await client.pending() <= calibration_pending:
                        drained_after = time.time() - target_ms / 1000
                        break
                    await asyncio.sleep(max(PENDING_POLL_S, (time.perf_counter() - asked) / POLL_COST_SHARE))
            return drained_after, await client.fired_log()
        finally:
            await client.close()

    calibration_pending = asyncio.run(_pending_now(service)) - len(deliver_at)
    drained_after, log = asyncio.run(drain_and_read())
    ours = [r for r in log if r.txn.startswith("m-")]
    counts = Counter(r.txn for r in ours)
    fire_times = sorted(r.fired_at_ms for r in ours)
    # The lag curve: the k-th fire's lag (its instant minus its deliverAt), in log order.
    points = [(k + 1, (r.fired_at_ms - deliver_at.get(r.txn, target_ms)) / 1000) for k, r in enumerate(ours)]
    drain_s = (fire_times[-1] - fire_times[0]) / 1000 if len(fire_times) > 1 else None
    figures = {
        "timers": count, **loaded,
        "fired_in_log": len(ours), "distinct_in_log": len(counts),
        "missing": len(set(deliver_at) - set(counts)), "doubled": sum(1 for n in counts.values() if n > 1),
        "exactly_once": len(counts) == count and len(ours) == count and set(counts) == set(deliver_at),
        "drain_s": drain_s, "fires_per_s": round(count / drain_s) if drain_s else None,
        "first_fire_lag_ms": fire_times[0] - target_ms if fire_times else None,
        "last_fire_lag_ms": fire_times[-1] - target_ms if fire_times else None,
        "drained_after_s": drained_after, "lag_curve_fit": linear_fit(points),
        "peak_rss_bytes": peak_memory(service), "fire_batches": fire_batches(fire_times),
        "drain_cpu_us_per_fire_all_processes": drain_cpu.us_per(len(ours)),
    }
    return figures, points


async def _each_call(calls: int, call) -> None:
    """call(0..calls-1), LOAD_CLIENTS at a time."""
    sequence = iter(range(calls))

    async def worker() -> None:
        for seq in sequence:
            await call(seq)

    await asyncio.gather(*(worker() for _ in range(LOAD_CLIENTS)))


async def _pending_now(service: TimerService) -> int:
    client = service.client(1)
    try:
        return await client.pending()
    finally:
        await client.close()


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("due_million", quick)
    count = TIMERS[quick]
    curves: dict[str, list] = {}
    rate = result.figure(f"drain of {count:,} due timers (default settings)", "fires/s", ">= 150,000 (ours)")
    exact = result.figure("log holds exactly the txns (none lost, none doubled)", "")
    missing = result.figure("timers missing from the log", "")
    doubled = result.figure("timers doubled in the log", "")
    linear = result.figure("lag curve linear (R^2 of a straight-line fit)", "", ">= 0.98")
    last = result.figure("lag of the last fire", "s")
    # Ours drains at fireBatch / this interval: during a backlog up to 4,096 per tick entry (the
    # adaptive batch), ticks at least min_gap_ms (5) apart.
    spacing = result.figure("interval between fire batches (ours: tick entries, >= 5 ms apart)", "ms")
    peak = result.figure("peak RSS per process (PostgreSQL: postmaster + backends, shared buffers counted in each)", "MiB")
    load = result.figure("load rate (batches of 256)", "timer ops/s")
    load_cpu = result.figure(f"load: {CPU_FIGURE_NOTE} per timer op", "us")
    drain_cpu = result.figure(f"drain (default settings): {CPU_FIGURE_NOTE} per fire", "us")

    def measure_one(service: TimerService, label: str | None = None) -> dict:
        figures, points = measure(service, quick, profile and service.name == OURS)
        curves[label or service.name] = points
        print(f"   {label or service.name}: {figures['fires_per_s']} fires/s, exactly once {figures['exactly_once']}, "
              f"fit {figures['lag_curve_fit']}", flush=True)
        return figures

    for name, figures in each_system(names, measure_one):
        result.details[name] = figures
        rate.values[name] = figures["fires_per_s"]
        exact.values[name] = figures["exactly_once"]
        missing.values[name] = figures["missing"]
        doubled.values[name] = figures["doubled"]
        linear.values[name] = figures["lag_curve_fit"]["r2"]
        spacing.values[name] = batch_interval(figures)
        last.values[name] = None if figures["last_fire_lag_ms"] is None else round(figures["last_fire_lag_ms"] / 1000, 2)
        peak.values[name] = ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in figures["peak_rss_bytes"].items())
        load.values[name] = figures["load_ops_per_s"]
        load_cpu.values[name] = figures["load_cpu_us_per_op_all_processes"]
        drain_cpu.values[name] = figures["drain_cpu_us_per_fire_all_processes"]
    if OURS in names:
        tuned = f"{OURS} ({TUNED_LABEL})"
        tuned_rate = result.figure(f"drain of {count:,} due timers, tuned: {TUNED_LABEL}", "fires/s", ">= 60,000 (ours)")
        tuned_exact = result.figure(f"tuned ({TUNED_LABEL}): log holds exactly the txns", "")
        tuned_linear = result.figure(f"tuned ({TUNED_LABEL}): lag curve R^2", "", ">= 0.98")
        tuned_spacing = result.figure(f"tuned ({TUNED_LABEL}): interval between tick entries", "ms")
        tuned_peak = result.figure(f"tuned ({TUNED_LABEL}): peak RSS per process", "MiB")
        tuned_cpu = result.figure(f"tuned ({TUNED_LABEL}): drain, {CPU_FIGURE_NOTE} per fire", "us")
        for _, figures in each_system((OURS,), lambda service: measure_one(service, tuned),
                                      queen_settings=TUNED_SETTINGS):
            result.details[tuned] = {"settings": TUNED_SETTINGS, **figures}
            tuned_rate.values[OURS] = figures["fires_per_s"]
            tuned_exact.values[OURS] = figures["exactly_once"]
            tuned_linear.values[OURS] = figures["lag_curve_fit"]["r2"]
            tuned_spacing.values[OURS] = batch_interval(figures)
            tuned_peak.values[OURS] = ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in figures["peak_rss_bytes"].items())
            tuned_cpu.values[OURS] = figures["drain_cpu_us_per_fire_all_processes"]
    png = results_dir(quick) / f"{today()}-due_million.png"
    drain_lag_curve(curves, count, png)
    result.plots.append(str(repo_relative(png)))
    return result
