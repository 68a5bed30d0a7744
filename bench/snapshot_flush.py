"""What a snapshot writer's disk flushes do to the journal's, by how often the writer flushes.

    .venv/bin/python bench/snapshot_flush.py                        # 3M timers, 3 alternating pairs
    .venv/bin/python bench/snapshot_flush.py --timers 1000000 --pairs 5

A node's journal is flushed (fdatasync) for every commit round, and a commit waits for it. A
snapshot writer (queen_raft/raft/snapshot_writer.py) writes the state's snapshot into a file of
the same disk. If it flushes only at its end, the kernel keeps its pages dirty while it encodes
(the writeback thresholds are a share of the machine's memory), and its one fsync then queues the
whole file's writeback ahead of the journal's next flushes. This builds a TenantState of N timers as
bench/state_bench.py does, then writes its snapshot with snapshot_file.write_snapshot, alternately
with the writer's flush step (snapshot_file.SYNC_EVERY_BYTES) and with one flush at the end, while
another process appends 4 KiB and fdatasyncs a file every 5 ms, as a journal under load does. It
prints, per write, the writer's time and the journal flushes' p50, p99 and max during it.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.state_bench import fill  # noqa: E402
from queen_raft.raft.replicated_state import SnapshotBlob  # noqa: E402
from queen_raft.raft.snapshot_file import SYNC_EVERY_BYTES, write_snapshot  # noqa: E402
from queen_raft.state import TenantState  # noqa: E402

JOURNAL_APPEND_BYTES = 4096
JOURNAL_GAP_S = 0.005
ONLY_AT_THE_END = 1 << 62


def journal_flushes(directory: str, stop, results) -> None:
    """In its own process (its own interpreter lock): append and fdatasync until told to stop."""
    latencies = []
    fd = os.open(os.path.join(directory, "journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while not stop.is_set():
            os.write(fd, b"j" * JOURNAL_APPEND_BYTES)
            started = time.perf_counter()
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(JOURNAL_GAP_S)
    finally:
        os.close(fd)
    results.put(latencies)


def one_write(state, directory: str, sync_every: int) -> str:
    context = multiprocessing.get_context("fork")
    stop, results = context.Event(), context.Queue()
    journal = context.Process(target=journal_flushes, args=(directory, stop, results))
    journal.start()
    time.sleep(0.5)
    path = os.path.join(directory, "raft.snapshot")
    started = time.perf_counter()
    syncs = write_snapshot(path, ([{}, SnapshotBlob(state)], (b"", 2, 1), (b"", 1, 1), set()), sync_every)
    elapsed = time.perf_counter() - started
    time.sleep(0.5)
    stop.set()
    latencies = sorted(results.get())
    journal.join()
    size = os.path.getsize(path)
    os.remove(path)
    label = "every 8 MiB" if sync_every == SYNC_EVERY_BYTES else "at the end "
    return (f"| {label} | {size / 2**20:,.0f} MiB | {syncs} | {elapsed:.1f} s | {statistics.median(latencies):.1f} | "
            f"{latencies[int(len(latencies) * 0.99)]:.1f} | {latencies[-1]:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=3_000_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--dir", default=str(Path(__file__).resolve().parent.parent / "data"),
                        help="where to write: a directory on the disk the nodes' data is on (default: ./data)")
    args = parser.parse_args()
    state = TenantState()
    fill(state, args.timers)
    gc.collect()
    gc.freeze()
    print(f"{args.timers:,} pending timers")
    print("| writer flushes | snapshot | flushes on the way | write | journal fdatasync p50 ms | p99 | max |")
    print("| --- | --- | --- | --- | --- | --- | --- |", flush=True)
    os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snapshot-flush-", dir=args.dir) as directory:
        for _ in range(args.pairs):
            for sync_every in (ONLY_AT_THE_END, SYNC_EVERY_BYTES):
                print(one_write(state, directory, sync_every), flush=True)


if __name__ == "__main__":
    main()
