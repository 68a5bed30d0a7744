"""The loop of a peer's scheduler process (Redis's poller, etcd's sweeper): one step after another
until SIGTERM, sleeping a poll interval after a step that found less than a full batch (a full one
means more is due at once, as the poller of arq or BullMQ does)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable


def run_until_sigterm(step: Callable[[], int], full_batch: int, interval_s: float,
                      retried: tuple[type[BaseException], ...]) -> None:
    """`step` answers how many timers it moved; an exception in `retried` (the server restarting,
    no leader yet) counts as none moved, and the loop goes on."""
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        try:
            moved = step()
        except retried:
            moved = 0
        if moved < full_batch:
            time.sleep(interval_s)
