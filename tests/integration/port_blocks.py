"""Fixed loopback ports for the tests that choose their own, kept apart between pytest-xdist workers.

The in-process Raft tests count their ports up from fixed bases (17300-17950): a group that
restarts must find its own address again, which a port the kernel picked would not promise. Run
serially, tests reuse these ports one after another. `make test` runs the suite in two workers,
so each worker takes its own copy of every block, `WORKER_STRIDE` above the last: two workers never
bind the same port, and inside a worker the blocks keep the serial order they always had. The
kernel's ephemeral ports (32768 and up, where free_ports draws) stay clear of them.
"""

from __future__ import annotations

import os

WORKER_STRIDE = 1000


def worker_index() -> int:
    """0 without xdist; n in worker "gw<n>"."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw"))


def worker_port(base: int) -> int:
    """`base` in this worker's copy of the fixed blocks."""
    return base + WORKER_STRIDE * worker_index()
