"""How long a node stops when it forks its snapshot writer, by pending timers.

    .venv/bin/python bench/fork_pause.py                          # 1M, 3M and 10M timers
    .venv/bin/python bench/fork_pause.py --timers 1000000 --forks 9

A snapshot writer is a forked child (queen_raft/raft/snapshot_writer.py). `os.fork()` copies the
parent's page tables before it returns, and the parent's tick thread, holding the GIL, does nothing
else meanwhile: every fire, append and answer of that node waits. The copy grows with the process's
resident memory, so the pause grows with the pending timers. This builds a TenantState of N timers
the way bench/state_bench.py does (its schedule commands, applied), then forks a child that exits at
once, `--forks` times (each size in a process of its own), and prints the process's RSS and the
fork's wall time (min, median, max) in the parent. The child's exit and reaping are not timed.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.state_bench import fill  # noqa: E402
from queen_raft.state import TenantState  # noqa: E402

DEFAULT_TIMERS = (1_000_000, 3_000_000, 10_000_000)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_BYTES


def fork_pauses_ms(forks: int) -> list[float]:
    pauses = []
    for _ in range(forks):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pauses.append((time.perf_counter() - started) * 1000)
        os.waitpid(pid, 0)
    return pauses


def measure(timers: int, forks: int) -> str:
    state = TenantState()
    fill(state, timers)
    gc.collect()
    gc.freeze()  # as a node's state is, between its collections
    pauses = fork_pauses_ms(forks)
    return (f"| {timers:,} | {resident_bytes() / 2**20:,.0f} MiB | {min(pauses):.1f} | "
            f"{statistics.median(pauses):.1f} | {max(pauses):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, action="append", help="pending timers (repeatable)")
    parser.add_argument("--forks", type=int, default=5)
    args = parser.parse_args()
    sizes = args.timers or list(DEFAULT_TIMERS)
    if len(sizes) == 1:
        print(measure(sizes[0], args.forks), flush=True)
        return
    print("| pending timers | RSS | fork ms, min | median | max |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    for timers in sizes:
        # Each size in a process of its own: its RSS is that state's, not what an earlier one left.
        subprocess.run([sys.executable, __file__, "--timers", str(timers), "--forks", str(args.forks)], check=True)


if __name__ == "__main__":
    main()
