"""The tick loop's wake-up: an asyncio.Event whose wait has a timeout and no task of its own."""

from __future__ import annotations

import asyncio


class WakeFlag:
    """asyncio.Event with a timed wait that costs one future and one timer handle per wait, not a
    task: asyncio.wait_for wraps the wait in a task, and its set-up and tear-down take about six
    loop turns per wake-up against two here, on every group's tick loop several times a second.
    Loop thread only (set from other threads through call_soon_threadsafe). A cancelled wait just
    raises CancelledError: there is no inner task to swallow it (see TickLoop.stop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._waiter: asyncio.Future | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout_s: float) -> None:
        """Until set (at once when it already is) or timeout_s passed, whichever comes first."""
        if self._set:
            return
        waiter = self._loop.create_future()
        self._waiter = waiter
        timer = self._loop.call_later(timeout_s, _settle_waiter, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if self._waiter is waiter:
                self._waiter = None


def _settle_waiter(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
