"""A long poll's wait: for an apply on this node, with its pop parked to ride the leader's next tick.

On the leader, a long poll that found nothing to deliver parks its pop (raft/tick_riders.py) while
it waits for an apply. If the tick loop takes the pop into a tick entry, the long poll's answer is
that pop's answer, whatever woke it: the pop may have committed, and with autoAck its messages are
settled, so dropping the answer would lose them. If nothing took it, the wait ends as a plain wait
does and the pop is unparked.

On a follower (no tick proposes there), or when another long poll of the same queue, partition and
consumer group is already parked, the wait is the plain wait on the apply signal.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.group_calls import unavailable
from queen_raft.api.ids import new_lease_id
from queen_raft.raft import GroupUnavailable

# The error code of a pop the group could not answer (as api/messages.py answers it).
POP_UNAVAILABLE = "unavailable"


async def wait_riding_tick(group: Any, signal: ApplySignal, key: Hashable, command_args: dict,
                           timeout_s: float, seen_generation: int) -> tuple[bool, dict | None]:
    """(applied, pop answer): applied as ApplySignal.wait says; the pop answer when a tick carried
    the parked pop (a dict, maybe an error or an empty batch), else None. A tick that failed
    raises the 503 a pop proposed alone would have (its outcome may be unknown)."""
    riders = getattr(group, "tick_riders", None)
    rider = None
    if riders is not None and group.is_leader:
        rider = riders.park(key, dict(command_args, leaseId=new_lease_id()))
    if rider is None:
        return await signal.wait(timeout_s, seen_generation), None
    try:
        applied = await signal.wait(timeout_s, seen_generation)
    finally:
        unparked = riders.withdraw(rider)
    if unparked:
        return applied, None
    try:
        return True, await rider.future
    except GroupUnavailable as exc:
        raise unavailable(POP_UNAVAILABLE, exc) from None
