"""The state machine's figures, measured in one process and printed as a table.

    .venv/bin/python bench/state_bench.py                 # 1,000,000 timers
    .venv/bin/python bench/state_bench.py --timers 100000 # a quick run
    .venv/bin/python bench/state_bench.py --profile       # cProfile of schedule and fire

What each row measures:
Rates and times are printed as wall clock / this process's CPU time: the machine is shared (2
cores, other processes), and CPU time is the figure that does not depend on the neighbours.

- schedule ops/s: `timers` entries of 256 schedule ops each (ids shaped like the API's: a UUIDv7-like
  messageId, a txn, a key), timing only `apply`; the commands are built outside the clock. Measured
  with the ops as maps (the form of older journals and of mixed calls) and as one schedule_rows
  group (what the API proposes for a call of schedules, docs/commands.md), msgpack decode of the
  entry included in both (every replica pays it).
- the schedule_throughput shape: the same decode + apply of that scenario's calls (one due
  instant and a fresh key prefix per 256-op call, and single-op entries), into a state that
  grows to N timers.
- memory per pending timer: tracemalloc's traced bytes of a fresh state holding N timers, with the
  commands dropped, divided by N; "beyond payload" subtracts each payload's bytes object
  (`sys.getsizeof(payload)`, header included). It counts everything else the state keeps per
  timer, including the key, txn and messageId strings the client sent.
- memory per remembered fire: N timers fired (N capped at MAX_REMEMBERED_FIRES), traced from
  before the fire, then the bytes freed by dropping the state's fired memory (fired_memory.py),
  divided by N. The fire decodes each timerKey from its stored entry and the memory keeps that
  str alive: "beyond its timerKey" subtracts its size (`sys.getsizeof`). The txn and messageId
  strings the log keeps are not freed, so not counted.
- snapshot / restore: `snapshot()` and `TenantState.restore()` of the N-timer state.
- fires/s: one `tick` drains all N timers due at once with a large fireBatch, and again with the
  default policy (256 per entry), each on a state restored from the snapshot; then the default
  policy once more with the state's fired memory removed, so the two rows give what remembering
  the fires costs a replica.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgpack  # noqa: E402

from queen_raft.state import TenantState  # noqa: E402
from queen_raft.state import limits  # noqa: E402
from queen_raft.state.fired_memory import FiredMemory  # noqa: E402

BATCH = 256
PAYLOAD = b'{"order":12345,"action":"expire","note":"a sixty-four byte body."}'[:64]
QUEUES = ("orders", "invoices", "reminders", "sessions")
START_MS = 1_767_225_600_000
# Spread deliverAt over a day so the due index is not a pre-sorted append.
SPREAD_MS = 86_400_000
THROUGHPUT_DELAY_MS = 3_600_000  # bench/schedule_throughput's FAR_DELAY_MS
LARGE_FIRE_BATCH = 1_000_000_000
LARGE_FIRE_BYTES = 2**40  # the largest policy value the state accepts (MAX_POLICY_VALUE)


ROW_FIELDS = ("queue", "timerKey", "partition", "delayMs", "txn", "messageId", "payload", "payloadZstd", "encrypted")


def schedule_entries(count: int, rows: bool):
    """The msgpack entries of `schedule_batches`, their ops as maps or as one schedule_rows group."""
    for command in schedule_batches(count):
        if rows:
            command["ops"] = [{"op": "schedule_rows", "rows": [[op[name] for name in ROW_FIELDS] for op in command["ops"]]}]
        yield msgpack.packb(command, use_bin_type=True)


def fill_entries(state: TenantState, count: int, rows: bool) -> Stopwatch:
    """Decode and apply the entries; the stopwatch holds the time spent in both."""
    watch = Stopwatch()
    for entry in list(schedule_entries(count, rows)):
        with watch:
            answer = state.apply(msgpack.unpackb(entry, raw=False))
        assert "results" in answer, answer
    return watch


def throughput_entries(count: int, batch: int):
    """The entries of bench/schedule_throughput's calls as the API proposes them: one
    schedule_rows group of `batch` rows a call (1: the single-op phase, one map), queue "bench",
    keys f"b-{seq}-{i}" under a fresh prefix per call (the key is the txn), all due in an hour,
    the group clock 1 ms later each entry: the due instants append, the keys go in one run."""
    now = START_MS
    for seq, start in enumerate(range(0, count, batch)):
        ops = [["bench", f"b-{seq}-{i}", "Default", THROUGHPUT_DELAY_MS, f"b-{seq}-{i}",
                f"0193a1b2-c3d4-7e5f-8a6b-{start + i:012x}", bytes(PAYLOAD), False, False]
               for i in range(min(batch, count - start))]
        if batch == 1:
            ops = [{"op": "schedule", **dict(zip(ROW_FIELDS, ops[0]))}]
        else:
            ops = [{"op": "schedule_rows", "rows": ops}]
        yield msgpack.packb({"op": "timers", "now": now, "producerSub": "bench-producer",
                             "maxPending": None, "ops": ops}, use_bin_type=True)
        now += 1


def apply_entries(state: TenantState, entries: list[bytes]) -> Stopwatch:
    """Decode and apply each entry; the stopwatch holds the time spent in both."""
    watch = Stopwatch()
    for entry in entries:
        with watch:
            answer = state.apply(msgpack.unpackb(entry, raw=False))
        assert "results" in answer, answer
    return watch


def schedule_batches(count: int):
    """Timers commands of BATCH ops; ids shaped like the ones the API mints."""
    for start in range(0, count, BATCH):
        ops = []
        for i in range(start, min(start + BATCH, count)):
            ops.append({
                "op": "schedule", "queue": QUEUES[i % len(QUEUES)], "timerKey": f"tenant/{i:09d}",
                "partition": "Default", "delayMs": 60_000 + (i * 7919) % SPREAD_MS,
                "txn": f"txn-{i:012d}", "messageId": f"0193a1b2-c3d4-7e5f-8a6b-{i:012x}",
                "payload": bytes(PAYLOAD), "payloadZstd": False, "encrypted": False,
            })
        yield {"op": "timers", "now": START_MS, "producerSub": "bench-producer",
               "maxPending": None, "ops": ops}


class Stopwatch:
    """Wall-clock and CPU seconds spent inside the measured calls."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu

    def rate(self, count: int) -> str:
        return f"{count / self.wall:,.0f} / {count / self.cpu:,.0f}"

    def seconds(self) -> str:
        return f"{self.wall:.2f} / {self.cpu:.2f}"


def fill(state: TenantState, count: int) -> Stopwatch:
    """Apply the schedules; the stopwatch holds the time spent inside `apply`."""
    watch = Stopwatch()
    for command in schedule_batches(count):
        with watch:
            answer = state.apply(command)
        assert "results" in answer, answer
    return watch


def drain(state: TenantState, fire_batch: int, fire_bytes: int) -> tuple[Stopwatch, int, int]:
    """Tick until nothing is due; returns (time in apply, timers fired, entries)."""
    now = START_MS + SPREAD_MS + 120_000
    policy = {"fireBatch": fire_batch, "fireMaxBytes": fire_bytes}
    watch = Stopwatch()
    fired = entries = 0
    while True:
        with watch:
            answer = state.apply({"op": "tick", "now": now, "policy": policy})
        entries += 1
        fired += answer["fired"]
        assert answer["appended"] == answer["fired"], answer
        if not answer["moreDue"]:
            return watch, fired, entries


def measure_memory(count: int) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state = TenantState()
    fill(state, count)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert state.counters()["pendingTimers"] == count
    payload_bytes = sys.getsizeof(bytes(PAYLOAD)) * count
    return used / count, (used - payload_bytes) / count


def measure_fired_memory(count: int) -> tuple[int, float, float]:
    """(fires remembered, bytes per remembered fire with its timerKey str, and beyond it)."""
    count = min(count, limits.MAX_REMEMBERED_FIRES)
    state = TenantState()
    fill(state, count)
    gc.collect()
    # Traced from before the fire: tracemalloc only sees a block freed if it saw it allocated.
    tracemalloc.start()
    drain(state, LARGE_FIRE_BATCH, LARGE_FIRE_BYTES)
    remembered = len(state.fired_memory)
    assert remembered == count, remembered
    state.fired_memory.index_tail()  # the key maps as a cancel or peek after the fires builds them
    key_bytes = sum(sys.getsizeof(key) for answers in state.fired_memory.by_queue.values() for key in answers)
    gc.collect()
    with_memory = tracemalloc.get_traced_memory()[0]
    state.fired_memory = FiredMemory()
    gc.collect()
    freed = with_memory - tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return count, freed / count, (freed - key_bytes) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=1_000_000, help="pending timers (N)")
    parser.add_argument("--profile", action="store_true", help="cProfile schedule and fire")
    parser.add_argument("--skip-memory", action="store_true", help="skip the tracemalloc pass")
    args = parser.parse_args()
    count = args.timers

    if args.profile:
        state = TenantState()
        profile = cProfile.Profile()
        profile.enable()
        fill(state, count)
        drain(state, LARGE_FIRE_BATCH, LARGE_FIRE_BYTES)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return

    rows: list[tuple[str, str, str]] = []
    state = TenantState()
    watch = fill(state, count)
    rows.append(("schedule ops/s, batches of 256 (wall / cpu)", watch.rate(count), ">= 100,000"))
    for form, as_rows in (("maps", False), ("schedule_rows", True)):
        del state
        gc.collect()
        state = TenantState()
        watch = fill_entries(state, count, as_rows)
        rows.append((f"decode + apply ops/s, batches of 256 as {form} (wall / cpu)", watch.rate(count), ""))
    for label, batch in (("batches of 256 as schedule_rows", BATCH), ("single-op entries", 1)):
        del state
        gc.collect()
        state = TenantState()
        watch = apply_entries(state, list(throughput_entries(count, batch)))
        rows.append((f"decode + apply ops/s, schedule_throughput shape, {label} (wall / cpu)",
                     watch.rate(count), ""))

    if not args.skip_memory:
        del state
        gc.collect()
        total, beyond = measure_memory(count)
        rows.append(("memory per pending timer, total (B)", f"{total:,.0f}", ""))
        rows.append(("memory per pending timer beyond payload (B)", f"{beyond:,.0f}", "<= 500"))
        fires, with_key, per_fire = measure_fired_memory(count)
        rows.append((f"memory per remembered fire, total (B), {fires:,} fires", f"{with_key:,.0f}", ""))
        rows.append(("memory per remembered fire beyond its timerKey (B)", f"{per_fire:,.0f}", "<= 64"))
        state = TenantState()
        fill(state, count)

    watch = Stopwatch()
    with watch:
        snapshot = state.snapshot()
    rows.append(("snapshot of N timers, s (wall / cpu)", watch.seconds(), "<= 5"))
    rows.append(("snapshot size (MB)", f"{len(snapshot) / 1e6:.1f}", ""))
    del state
    gc.collect()

    watch = Stopwatch()
    with watch:
        restored = TenantState.restore(snapshot)
    rows.append(("restore of N timers, s (wall / cpu)", watch.seconds(), "<= 5"))
    rows.append(("restored snapshot identical", str(restored.snapshot() == snapshot), "True"))

    watch, fired, entries = drain(restored, LARGE_FIRE_BATCH, LARGE_FIRE_BYTES)
    assert fired == count
    rows.append((f"fires/s, one tick of fireBatch {LARGE_FIRE_BATCH:,} (wall / cpu)",
                 watch.rate(fired), ">= 100,000"))
    del restored
    gc.collect()

    restored = TenantState.restore(snapshot)
    watch, fired, entries = drain(restored, 256, 4 * 1024 * 1024)
    assert fired == count
    rows.append((f"fires/s, default policy: {entries:,} ticks of 256 (wall / cpu)",
                 watch.rate(fired), ">= 100,000"))
    del restored
    gc.collect()

    # The same drain with no fired memory: what remembering the fires costs a replica's apply.
    restored = TenantState.restore(snapshot)
    restored.fired_memory = None
    watch, fired, entries = drain(restored, 256, 4 * 1024 * 1024)
    assert fired == count
    rows.append(("fires/s, default policy, fires not remembered (wall / cpu)", watch.rate(fired),
                 "the row above within 5 %"))

    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    title = f"load average {load} at the end; state machine, N = {count:,} timers, payload {len(PAYLOAD)} B, Python {sys.version.split()[0]}"
    widths = [max(len(row[i]) for row in rows + [("figure", "measured", "target")]) for i in range(3)]
    print(title)
    print(" | ".join(h.ljust(w) for h, w in zip(("figure", "measured", "target"), widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))


if __name__ == "__main__":
    main()
