"""Wakes long polls when a group applies entries, without proposing anything.

Applies happen on the Raft thread; waiters live on the event loop. A notify schedules at most one
wake-up on the loop at a time, and only when someone waits, so a burst of thousands of applies
costs the loop one callback, not thousands.
"""

from __future__ import annotations

import asyncio
import threading


class ApplySignal:
    """A generation count of applies, and a way to wait for it to move.

    A waiter reads `generation` before it looks at the state and passes it to `wait`: an apply
    that lands between the look and the wait is then seen at once instead of being lost.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._generation = 0
        self._waiting = 0
        self._wake_scheduled = False
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    @property
    def generation(self) -> int:
        return self._generation

    def notify_threadsafe(self) -> None:
        """Called from any thread after entries were applied."""
        with self._lock:
            self._generation += 1
            loop = self._loop
            if loop is None or self._waiting == 0 or self._wake_scheduled:
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

    async def wait(self, timeout_s: float, seen_generation: int) -> bool:
        """True when an apply happened since `seen_generation` was read, False on timeout."""
        if self._event is None:
            self.bind(asyncio.get_running_loop())
        with self._lock:
            if self._generation != seen_generation:
                return True
            self._waiting += 1
            event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiting -= 1
