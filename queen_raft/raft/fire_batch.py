"""The adaptive fire batch: how many timers the leader's next tick may fire (docs/spec.md section 2).

A tick fires at most its command's `policy.fireBatch` timers (docs/commands.md, `tick`). Outside a
backlog that is the configured `timer_fire_batch` (256), so an entry's apply stays short and the
lag of sparse timers is what one small entry costs. During a backlog every entry's fixed cost
(proposal, replication, flush, the answer's way back) is paid per tick, and ticks are at least
`timer_min_gap_ms` apart, so the drain rate is the batch over the gap: the batch grows instead.

The rule, applied by the leader to each committed tick's answer in log order:

- the tick fired its whole batch and more timers are due: the next batch is twice that tick's
  batch, at most the ceiling (`timer_fire_batch_max`, 4,096); ticks already in flight do not
  double it again (two answers of the same batch size ask for the same next size);
- the tick stopped early on the 4 MiB payload bound (`fireMaxBytes`, unchanged by this rule) while
  more are due: the batch stays, a larger count would not fire more bytes;
- nothing more is due (the backlog cleared), or the tick failed: back to the base batch.

Only the leader decides: the size travels in each tick command, so every replica applies the
same batch, and an entry without it fires the state's default batch as it always did.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FireBatchBounds:
    """The base batch (outside a backlog) and the ceiling a backlog may grow it to."""

    base: int
    ceiling: int

    def __post_init__(self) -> None:
        if self.base < 1:
            raise ValueError("the base fire batch must be >= 1")
        if self.ceiling < self.base:
            raise ValueError("the fire batch ceiling must be >= the base fire batch")


def next_fire_batch(bounds: FireBatchBounds, current: int, proposed: int, fired: int,
                    more_due: bool) -> int:
    """The batch of the next tick proposal, after a tick proposed with `proposed` answered that it
    fired `fired` timers and whether more are due; `current` is the batch the leader uses now."""
    if not more_due:
        return bounds.base
    if fired >= proposed:
        return min(bounds.ceiling, max(current, 2 * proposed))
    return current
