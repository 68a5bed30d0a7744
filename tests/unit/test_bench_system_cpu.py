"""bench/system_cpu.py: the CPU of a system's processes, their descendants included, and of a
process killed inside the window up to its last reading."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bench.system_cpu import SystemCpu, process_tree

BURN_S = 0.4
DEADLINE_S = 60.0
# Burns BURN_S of its own CPU (however long the shared cores make that take), says so, then waits.
BURNER = f"""
import time
while time.process_time() < {BURN_S}:
    pass
print("burnt", flush=True)
time.sleep(600)
"""
# Starts a burner as its child and waits on it: the CPU is the grandchild's, not the root's.
PARENT = f"""
import subprocess, sys
subprocess.run([sys.executable, "-c", {BURNER!r}])
"""


def _until_burnt(process: subprocess.Popen) -> None:
    assert process.stdout.readline().strip() == b"burnt"


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(DEADLINE_S)


def test_a_descendant_born_inside_the_window_is_counted():
    root = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    try:
        with SystemCpu(lambda: {"root": root.pid}) as cpu:
            _until_burnt(root)  # the grandchild shares the root's stdout
        assert cpu.seconds >= BURN_S * 0.9
    finally:
        for pid in process_tree([root.pid]) - {root.pid}:  # the grandchild, by PID
            os.kill(pid, signal.SIGKILL)
        _stop(root)


def test_a_process_killed_inside_the_window_counts_up_to_its_last_reading():
    burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE)
    try:
        with SystemCpu(lambda: {"burner": burner.pid} if burner.poll() is None else {}) as cpu:
            _until_burnt(burner)
            deadline = time.monotonic() + DEADLINE_S
            # The sampler has read the burner after its burn: then kill it, as failover does.
            while cpu._latest.get(burner.pid, 0.0) < BURN_S * 0.9 and time.monotonic() < deadline:
                time.sleep(0.05)
            burner.send_signal(signal.SIGKILL)
            burner.wait(DEADLINE_S)
        assert cpu.seconds >= BURN_S * 0.9
    finally:
        _stop(burner)


def test_cpu_used_before_the_window_is_not_counted():
    burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE)
    try:
        _until_burnt(burner)
        with SystemCpu(lambda: {"burner": burner.pid}) as cpu:
            time.sleep(0.5)
        assert cpu.seconds < BURN_S / 4
        assert cpu.us_per(1000) == round(cpu.seconds * 1000, 1)
        assert cpu.us_per(0) is None
    finally:
        _stop(burner)
