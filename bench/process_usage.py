"""CPU time and memory of a process, read from /proc (Linux), for the per-node figures."""

from __future__ import annotations

import os
from typing import Callable

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


def resident_breakdown(pid: int) -> dict[str, int]:
    """Resident bytes by kind (/proc/PID/smaps_rollup): `rss` in all; `anonymous`, the process's own
    heap and stacks; `file_backed`, pages of mapped files (rss less anonymous), which are page cache
    the kernel can reclaim once clean (the Raft journal's mmap, the interpreter's libraries)."""
    found = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            fields = line.split()
            if len(fields) == 3 and fields[2] == "kB" and fields[0] in ("Rss:", "Anonymous:"):
                found[fields[0].rstrip(":").lower()] = int(fields[1]) * 1024
    return {"rss": found["rss"], "anonymous": found["anonymous"], "file_backed": found["rss"] - found["anonymous"]}


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


class CpuWindow:
    """CPU used by a system's processes between start() and stop(), as a share of one core.

    The processes are listed again at stop(): one that appeared inside the window (a PostgreSQL
    backend for a new connection) is counted from zero; one that left it is dropped.
    """

    def __init__(self, pids_source: Callable[[], dict[str, int]] | dict[str, int]):
        self._source = pids_source if callable(pids_source) else (lambda: dict(pids_source))
        self._started_cpu: dict[int, float] = {}
        self._started_at = 0.0

    def _sample(self) -> dict[str, tuple[int, float]]:
        found = {}
        for name, pid in self._source().items():
            try:
                found[name] = (pid, cpu_seconds(pid))
            except (FileNotFoundError, ProcessLookupError):
                continue
        return found

    def start(self, now_s: float) -> None:
        self._started_cpu = {pid: cpu for pid, cpu in self._sample().values()}
        self._started_at = now_s

    def stop(self, now_s: float) -> dict[str, float]:
        """{name: cores used} (1.0 = one full core) over the window; "postgres/<pid>" backends are
        added into "postgres"."""
        elapsed = max(1e-9, now_s - self._started_at)
        used: dict[str, float] = {}
        for name, (pid, cpu) in self._sample().items():
            key = name.split("/", 1)[0]
            used[key] = used.get(key, 0.0) + (cpu - self._started_cpu.get(pid, 0.0)) / elapsed
        return {name: round(cores, 3) for name, cores in used.items()}
