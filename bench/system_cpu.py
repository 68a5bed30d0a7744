"""CPU time per operation summed over every process of a system: the fair figure on a machine
whose cores the systems, the load generator and the consumer share.

A system's processes are its `pids()` (our nodes; etcd's members and sweeper; redis-server and its
poller; the postmaster, its backends and the poller) and every descendant of them (a snapshot
child, a PostgreSQL backend opened inside the window). The load generator and the consumer process
are not the system's and are not counted.

A sampler thread reads /proc every SAMPLE_EVERY_S, so a process killed inside the window (the
failover and recovery scenarios) still counts up to its last reading (at most SAMPLE_EVERY_S
short), and one born inside the window counts from zero. A process that lives less than
SAMPLE_EVERY_S between two readings is missed: none of the systems starts such processes in
the measured phases.
"""

from __future__ import annotations

import threading
from typing import Callable

from bench.process_usage import children_of, cpu_seconds

SAMPLE_EVERY_S = 0.2


def process_tree(roots: list[int]) -> set[int]:
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        try:
            todo += children_of(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def tree_cpu_seconds(roots: list[int]) -> dict[int, float]:
    readings = {}
    for pid in process_tree(roots):
        try:
            readings[pid] = cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return readings


class SystemCpu:
    """`with SystemCpu(service.pids) as cpu: ...`, then cpu.seconds: the CPU every process of the
    system used inside the block."""

    def __init__(self, pids_source: Callable[[], dict[str, int]]):
        self._source = pids_source
        self._baseline: dict[int, float] = {}
        self._latest: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.seconds = 0.0

    def _read(self) -> None:
        for pid, cpu in tree_cpu_seconds(list(self._source().values())).items():
            self._baseline.setdefault(pid, 0.0)  # born inside the window: counted from zero
            self._latest[pid] = cpu

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._read()

    def __enter__(self) -> "SystemCpu":
        self._baseline = tree_cpu_seconds(list(self._source().values()))
        self._latest = dict(self._baseline)
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self.seconds = sum(cpu - self._baseline[pid] for pid, cpu in self._latest.items())

    def us_per(self, operations: int) -> float | None:
        """Microseconds of CPU per operation (None when there were none)."""
        return round(self.seconds * 1e6 / operations, 1) if operations else None


CPU_FIGURE_NOTE = "CPU summed over all the system's processes"
