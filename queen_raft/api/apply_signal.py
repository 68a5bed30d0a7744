"""Wakes long polls when a group applies entries, without proposing anything.

Applies happen on the Raft thread; waiters live on the event loop. A notify schedules at most one
wake-up on the loop at a time, and only when someone waits, so a burst of thousands of applies
costs the loop one callback, not thousands.
"""

from __future__ import annotations

import asyncio
import threading


class ApplySignal:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._waiting = 0
        self._wake_scheduled = False
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def notify_threadsafe(self) -> None:
        """Called from any thread after entries were applied."""
        loop = self._loop
        if loop is None or self._waiting == 0:
            return
        with self._lock:
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: the node is stopping, nobody waits any more
            pass

    def _wake(self) -> None:
        with self._lock:
            self._wake_scheduled = False
        event, self._event = self._event, asyncio.Event()
        if event is not None:
            event.set()

    async def wait(self, timeout_s: float) -> bool:
        """True when an apply happened during the wait, False on timeout."""
        if self._event is None:
            self.bind(asyncio.get_running_loop())
        event = self._event
        self._waiting += 1
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            self._waiting -= 1
