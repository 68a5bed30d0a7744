"""A sampler for the ten_million scenario: the machine's available memory, and the snapshot writers
(the node processes' forked children) with their copied pages; a guard that stops the scenario
before the machine runs out.

A writer is forked with its node's whole heap shared; the pages it touches (every pending timer's
reference count) are copied, so its cost is its `Private_Dirty` (smaps_rollup), not its RSS. Once a
second the sampler reads /proc/meminfo and each child of each node; when MemAvailable falls below
the floor it sets `tripped` and sends SIGINT to this process (the scenario stops its cluster on the
KeyboardInterrupt, as it does on ^C), so a run that cannot fit ends with its figures so far and the
peak that stopped it, instead of with the kernel's OOM killer choosing a process.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

from bench.process_usage import children_of

SAMPLE_S = 1.0
FLOOR_BYTES = 1536 * 2**20


def available_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def private_dirty_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # the writer ended between the listing and the read
        return None
    return None


class MemoryWatch:
    """`with MemoryWatch(pids):` samples until the block ends; `figures()` after it."""

    def __init__(self, node_pids: Callable[[], dict[str, int]], floor_bytes: int = FLOOR_BYTES) -> None:
        self._node_pids = node_pids
        self._floor = floor_bytes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self.lowest_available = available_bytes()
        self.writer_peak: dict[str, int] = {}
        self.most_writers_at_once = 0
        self.tripped = False

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def _sample(self) -> None:
        available = available_bytes()
        self.lowest_available = min(self.lowest_available, available)
        writers = 0
        for node, pid in self._node_pids().items():
            try:
                children = children_of(pid)
            except OSError:  # a node being restarted
                continue
            for child in children:
                copied = private_dirty_bytes(child)
                if copied is not None:
                    writers += 1
                    self.writer_peak[node] = max(self.writer_peak.get(node, 0), copied)
        self.most_writers_at_once = max(self.most_writers_at_once, writers)
        if available < self._floor and not self.tripped:
            self.tripped = True
            print(f"   memory guard: {available / 2**30:.1f} GiB available (floor {self._floor / 2**30:.1f}); "
                  f"snapshot writers now {writers}, peaks {self.figures()['writer_private_dirty_mib']}", flush=True)
            os.kill(os.getpid(), signal.SIGINT)

    def figures(self) -> dict:
        return {"lowest_available_gib": round(self.lowest_available / 2**30, 2),
                "writer_private_dirty_mib": {node: round(peak / 2**20) for node, peak in sorted(self.writer_peak.items())},
                "most_writers_at_once": self.most_writers_at_once,
                "guard_tripped": self.tripped}
