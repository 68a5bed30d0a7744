"""CPU time and memory of a process, read from /proc (Linux), for the per-node figures."""

from __future__ import annotations

import os
from dataclasses import dataclass

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (its threads included)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        text = stat.read().decode()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = text[text.rindex(")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLOCK_TICKS_PER_S


def _status_kib(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(f"{key} not in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS") * 1024


def peak_rss_bytes(pid: int) -> int:
    """The high-water mark of the resident set since the process started (VmHWM)."""
    return _status_kib(pid, "VmHWM") * 1024


def children_of(pid: int) -> list[int]:
    """Direct children (PostgreSQL's backends are children of the postmaster)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(p) for p in children.read().split()]
        except FileNotFoundError:
            continue
    return found


@dataclass
class CpuWindow:
    """CPU used by a set of processes between start() and stop(), as a share of one core."""

    pids: dict[str, int]
    started_cpu: dict[str, float] | None = None
    started_at: float = 0.0

    def start(self, now_s: float) -> None:
        self.started_cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.started_at = now_s

    def stop(self, now_s: float) -> dict[str, float]:
        """{name: cores used} (1.0 = one full core) over the window."""
        assert self.started_cpu is not None, "stop() before start()"
        elapsed = max(1e-9, now_s - self.started_at)
        used = {}
        for name, pid in self.pids.items():
            try:
                used[name] = round((cpu_seconds(pid) - self.started_cpu[name]) / elapsed, 3)
            except FileNotFoundError:  # the process died inside the window (failover)
                used[name] = None
        return used
