"""Sampling profiles of the leader node during a measured phase (`--profile`), with py-spy.

py-spy samples the process from outside (ptrace; the suite runs as root), so the node runs its
own code unchanged. The raw collapsed stacks are kept in bench/results/profiles/, and a summary of
the hottest functions (self time: the frame on top of the stack; total time: anywhere on it) is
written beside them and printed.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from bench.report import RESULTS_DIR, today

PROFILES_DIR = RESULTS_DIR / "profiles"
# 100 Hz is py-spy's default; --nonblocking keeps it from pausing the node (we measure under load).
# --gil keeps only samples of the thread holding the interpreter lock: in a Python process on two
# shared cores that lock is the resource everything queues for, and waits (poll, select, a syscall
# that releases the lock) drop out, while a syscall that keeps it (mmap.flush's msync) stays in.
SAMPLE_RATE_HZ = 100
TOP_FUNCTIONS = 20
PY_SPY_STOP_TIMEOUT_S = 30.0


def py_spy_path() -> Path:
    return Path(sys.executable).parent / "py-spy"


@contextlib.contextmanager
def profiled(service: object, label: str, duration_s: float, enabled: bool) -> Iterator[None]:
    """Samples the tenant leader's node for the block's duration when enabled (ours only)."""
    if not enabled:
        yield
        return
    leader = service.leader()
    pid = service.pids()[leader]
    PROFILES_DIR.mkdir(parents=True, exist_ok=True)
    raw_path = PROFILES_DIR / f"{today()}-{label}-{leader}.txt"
    spy = subprocess.Popen([str(py_spy_path()), "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE_HZ),
                            "--format", "raw", "--nolineno", "--nonblocking", "--threads", "--gil", "--output", str(raw_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            spy.wait(timeout=PY_SPY_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
    if raw_path.exists():
        summary = summarize(raw_path)
        raw_path.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(render(label, leader, summary))


def summarize(raw_path: Path) -> dict:
    self_samples: collections.Counter = collections.Counter()
    total_samples: collections.Counter = collections.Counter()
    thread_samples: collections.Counter = collections.Counter()
    total = 0
    for line in raw_path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread, frames = frames[0], frames[1:]  # --threads puts the thread first
        total += count
        thread_samples[thread] += count
        if frames:
            self_samples[frames[-1]] += count
        for frame in set(frames):
            total_samples[frame] += count
    share = lambda n: round(100.0 * n / total, 1) if total else 0.0  # noqa: E731
    return {
        "samples": total,
        "threads": [{"thread": t, "pct": share(n)} for t, n in thread_samples.most_common()],
        "self": [{"function": f, "pct": share(n)} for f, n in self_samples.most_common(TOP_FUNCTIONS)],
        "total": [{"function": f, "pct": share(n)} for f, n in total_samples.most_common(TOP_FUNCTIONS * 2)],
    }


def render(label: str, node: str, summary: dict) -> str:
    lines = [f"profile {label} (leader {node}, {summary['samples']} samples holding the GIL)", "  threads:"]
    lines += [f"    {t['pct']:5.1f}%  {t['thread']}" for t in summary["threads"][:6]]
    lines.append("  self time:")
    lines += [f"    {f['pct']:5.1f}%  {f['function']}" for f in summary["self"][:12]]
    return "\n".join(lines)
