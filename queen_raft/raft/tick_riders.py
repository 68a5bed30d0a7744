"""Pops that ride the leader's next tick entry: the long polls parked on the leader.

A long poll that finds nothing to deliver parks here (at most one per queue, partition and consumer
group) with the pop it would propose. The leader's tick loop takes the parked pops when it proposes
a tick, and puts them in the tick's entry, after the tick: `[tick, pop, pop, ...]` as one batch entry
(docs/commands.md, "Batches"). Each pop then sees the messages that tick fired, in the same apply on
every replica, and commits with it: a fired message reaches a parked consumer in one commit round,
not two (the tick's, then a pop's after the long poll woke). The pop is durable before it answers,
as any pop: its answer is the result of a committed entry.

A pop that finds nothing (the tick fired into other queues) answers an empty batch and changes
nothing; its long poll parks again. That costs one small command in a tick entry, at most one per
parked long poll per tick.

Loop thread only. Once taken, a rider belongs to the tick that took it: that tick settles its future
with the pop's answer or with the error that ended the tick, on every path, so the long poll never
drops the answer of a pop that may have committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

# The most pops one tick entry carries: a tick must stay cheap to apply (the fire lag of every
# timer waits on it), and a pop that finds nothing costs an apply on every replica.
RIDERS_PER_TICK_MAX = 32


class Rider:
    """One parked long poll: the pop command to propose, and the future its answer goes to."""

    __slots__ = ("key", "command", "future")

    def __init__(self, key: Hashable, command: dict, future: asyncio.Future) -> None:
        self.key = key
        self.command = command
        self.future = future


class TickRiders:
    def __init__(self) -> None:
        self._parked: dict[Hashable, Rider] = {}  # in parking order: the oldest rides first

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, key: Hashable, command: dict) -> Rider | None:
        """Park a pop for the next tick; None when one is already parked for the key (that long poll
        takes what lands, and the others look again after its pop applied, as pop turns do)."""
        if key in self._parked:
            return None
        future = asyncio.get_running_loop().create_future()
        # A long poll cancelled after its rider was taken never reads the answer: retrieve it here
        # so an error does not log "exception was never retrieved".
        future.add_done_callback(_retrieve)
        rider = self._parked[key] = Rider(key, command, future)
        return rider

    def withdraw(self, rider: Rider) -> bool:
        """Unpark; False when a tick already took the rider (its answer then comes from that tick)."""
        if self._parked.get(rider.key) is rider:
            del self._parked[rider.key]
            return True
        return False

    def take(self, limit: int = RIDERS_PER_TICK_MAX) -> list[Rider]:
        """The oldest parked riders, at most `limit`, unparked: the caller must settle each one."""
        taken = []
        for key in list(self._parked)[:limit]:
            taken.append(self._parked.pop(key))
        return taken


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def settle_riders(riders: list[Rider], results: list | None, error: BaseException | None) -> None:
    """Each rider's future gets its pop's answer (results in order), else `error`; once."""
    for index, rider in enumerate(riders):
        future = rider.future
        if future.done():
            continue
        if error is None and results is not None and index < len(results):
            future.set_result(results[index])
        else:
            future.set_exception(error if error is not None else RuntimeError("the tick entry answered no pop result"))
