"""One pop at a time per (tenant, queue, partition, consumer group) on this node.

When a message lands, every long poll parked on its queue wakes. Without turns each would propose
a pop and all but one would commit an empty entry. With turns, the next waiter looks at the state
again after the previous pop was applied here, and proposes only if something is still there.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager


class PopTurns:
    def __init__(self) -> None:
        # key -> (lock, holders + waiters); an entry lives only while someone uses it, so the map
        # is bounded by the pops in progress.
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def turn(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
