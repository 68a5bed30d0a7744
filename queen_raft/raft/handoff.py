"""The result handoff: proposal results go from pysyncobj's tick thread to the asyncio loop."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ResultHandoff:
    """Hands results from pysyncobj's tick thread to the loop, one loop wake-up per batch.

    call_soon_threadsafe writes to the loop's self-pipe; under load one write per result costs a
    syscall each, so results queue here and a single scheduled drain settles all that arrived.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: collections.deque = collections.deque()
        self._drain_scheduled = False

    def put(self, settle: Callable[[Any, Any], None], result: Any, error: int) -> None:  # tick thread
        self._pending.append((settle, result, error))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # loop closed: the node is stopping
                pass

    def _drain(self) -> None:  # loop thread
        # Reset first: a result appended after this line schedules its own drain.
        self._drain_scheduled = False
        pending = self._pending
        while pending:
            settle, result, error = pending.popleft()
            try:
                settle(result, error)
            except Exception:  # one bad settle must not strand the results queued behind it
                log.exception("settling a proposal's answer failed")
