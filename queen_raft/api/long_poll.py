"""A long poll's waits for an apply on this node, with its pop parked meanwhile to ride the
leader's next tick.

On the leader, a long poll that found nothing to deliver parks its pop (raft/tick_riders.py) while
it waits. If the tick loop takes the pop into a tick entry, the long poll's answer is that pop's
answer, whatever ended the wait: the pop may have committed, and with autoAck its messages are
settled, so dropping the answer would lose them. If nothing took it, the wait ends as a plain wait
does and the pop is unparked.

A long poll that finds nothing parks at once, with no read barrier first (api/messages.py gives
an empty answer only after one): a pop taken by a tick is still ordered after every write
acknowledged before the call began, since the tick entry carrying it is proposed after the pop was
parked; and a write this replica has not applied yet wakes the wait when it does.

On a follower (no tick proposes there), or when another long poll of the same queue, partition and
consumer group is already parked, the waits are the plain ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Hashable
from typing import Any, TypeVar

from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.group_calls import unavailable
from queen_raft.api.ids import new_lease_id
from queen_raft.raft import GroupUnavailable
from queen_raft.raft.tick_riders import Rider

# The error code of a pop the group could not answer (as api/messages.py answers it).
POP_UNAVAILABLE = "unavailable"

T = TypeVar("T")


async def ride_tick_during(group: Any, key: Hashable, command_args: dict,
                           waiting: Awaitable[T]) -> tuple[T | None, dict | None]:
    """(what `waiting` gave, pop answer): the pop answer (a dict, maybe an error or an empty batch)
    when a tick carried the pop parked while `waiting` ran, else None. When `waiting` fails and a
    tick took the pop, a pop answer with messages is returned (with None) instead of the failure."""
    riders = getattr(group, "tick_riders", None)
    rider = None
    if riders is not None and group.is_leader:
        rider = riders.park(key, dict(command_args, leaseId=new_lease_id()))
    if rider is None:
        return await waiting, None
    try:
        value = await waiting
    except asyncio.CancelledError:
        riders.withdraw(rider)
        raise
    except Exception:
        if riders.withdraw(rider):
            raise
        answer = await _answer_of(rider)
        if answer.get("messages"):
            return None, answer
        raise
    if riders.withdraw(rider):
        return value, None
    return value, await _answer_of(rider)


async def _answer_of(rider: Rider) -> dict:
    """The taken pop's answer; a tick that failed raises the 503 a pop proposed alone would have
    (its outcome may be unknown)."""
    try:
        return await rider.future
    except GroupUnavailable as exc:
        raise unavailable(POP_UNAVAILABLE, exc) from None


async def wait_riding_tick(group: Any, signal: ApplySignal, key: Hashable, command_args: dict,
                           timeout_s: float, seen_generation: int) -> tuple[bool, dict | None]:
    """(applied, pop answer): applied as ApplySignal.wait says (True when a tick carried the pop);
    the pop answer as `ride_tick_during` gives it."""
    applied, answer = await ride_tick_during(group, key, command_args, signal.wait(timeout_s, seen_generation))
    return (True if answer is not None else bool(applied)), answer
