"""Log lines that time a node's start, phase by phase, so a slow restart says where it went.

A restart with many pending timers spends its time in a few phases: the interpreter and its
imports, opening each group's journal (every record is checked), reading and verifying the
snapshot, restoring the state from it, and applying the journal's committed entries past the
snapshot. Each phase logs one INFO line with its duration when it ends (the log's timestamps place
it); bench/recovery.py collects them from the restarted node's log.

A phase started with `phase_clock()` also logs `cpu_s`, the CPU seconds its thread spent in it: on
a machine whose cores other processes share, the wall time says how long the phase waited, the CPU
time how much work it was. Each phase runs on one thread (the group's tick thread or the journal's
opener), so the thread's own clock counts it and not the other groups loading meanwhile.

`process_age_s` is the time since the kernel started this process, so the first line can say what
the interpreter and the imports took before any of this code ran.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("queen_raft.startup")


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        # Field 22 of stat (the 20th after the command name): start time in clock ticks since boot.
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def log_process_started(node_id: str) -> None:
    age = process_age_s()
    if age is not None:
        log.info("startup node=%s phase=imports seconds=%.3f cpu_s=%.3f (interpreter start and imports)",
                 node_id, age, time.process_time())


def phase_clock() -> tuple[float, float]:
    """Where a phase starts: (monotonic seconds, this thread's CPU seconds)."""
    return time.monotonic(), time.thread_time()


def log_phase(phase: str, started: float | tuple[float, float], detail: str = "", **fields) -> None:
    """One phase's line: `startup phase=<phase> seconds=<s> [cpu_s=<s>] key=value ... (detail)`;
    `started` is a monotonic instant, or `phase_clock()` on the thread that ran the phase."""
    if isinstance(started, tuple):
        started, cpu_started = started
        fields = {"cpu_s": f"{time.thread_time() - cpu_started:.3f}", **fields}
    values = "".join(f" {key}={value}" for key, value in fields.items())
    suffix = f" ({detail})" if detail else ""
    log.info("startup phase=%s seconds=%.3f%s%s", phase, time.monotonic() - started, values, suffix)
