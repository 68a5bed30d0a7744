"""The read barrier: a linearizable read waits for a no-op entry proposed after the read began.

Once that entry has committed and applied here, this replica has applied every write that was
acknowledged before the read began (by any node: an acknowledged write committed before the
barrier did). Concurrent reads share one barrier round, so a burst of reads costs one entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class ReadBarrier:
    def __init__(self, propose: Callable[[dict], Awaitable[object]]) -> None:
        self._propose = propose
        self._waiting: asyncio.Future | None = None
        self._running = False
        self.proposed = 0

    def join(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """A future that completes (or fails with GroupUnavailable) once a barrier proposed after
        this call has applied here."""
        # A read may only join a barrier proposed after it began: one proposed earlier might sit
        # before a write the reader already saw acknowledged. So reads gather on the waiting round,
        # which is proposed once the running one (if any) is done.
        if self._waiting is None:
            self._waiting = loop.create_future()
            if not self._running:
                # Let the reads of this loop iteration join before proposing.
                self._running = True
                loop.call_soon(self._start_round, loop)
        return self._waiting

    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        round_future, self._waiting = self._waiting, None
        self._running = True
        loop.create_task(self._run_round(loop, round_future))

    async def _run_round(self, loop: asyncio.AbstractEventLoop, round_future: asyncio.Future) -> None:
        try:
            self.proposed += 1
            await self._propose({"op": "barrier"})
        except Exception as exc:
            round_future.set_exception(exc)
            round_future.exception()  # retrieved here: readers that left must not log it
        else:
            round_future.set_result(None)
        finally:
            if self._waiting is not None:
                self._start_round(loop)
            else:
                self._running = False
