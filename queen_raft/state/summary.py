"""Per-queue figures of a tenant's state for the overview (GET /api/v1/overview): pending timers,
the next due instant, messages not yet consumed, dead letters. A read: it never changes state.

The next due instant of each queue comes from one walk of the tenant's due index (fire order), up
to NEXT_DUE_SCAN timers, so an overview costs a bounded time under the apply lock however many
timers are pending. A queue whose earliest timer lies past that walk answers `nextDueAt: null`
with `nextDueAfter`: the instant the walk reached, before which nothing of that queue is due.
"""

from __future__ import annotations

from itertools import islice

from .timers import T_DUE_AT, T_QUEUE

# Timers walked in due order to find each queue's next due instant.
NEXT_DUE_SCAN = 10_000


def next_due_by_queue(due, pending: int, wanted: set[str],
                      scan: int = NEXT_DUE_SCAN) -> tuple[dict[str, int], int | None]:
    """({queue: its earliest dueAt} for the queues met in the first `scan` due timers, the dueAt the
    walk stopped at when it stopped before meeting every wanted queue, else None). `due` yields
    the `pending` timers in fire order."""
    found: dict[str, int] = {}
    last_due = None
    for timer in islice(due, scan):
        last_due = timer[T_DUE_AT]
        found.setdefault(timer[T_QUEUE], last_due)
        if len(found) == len(wanted):
            return found, None
    return found, (last_due if pending > scan else None)


def queue_summaries(state, scan: int = NEXT_DUE_SCAN) -> list[dict]:
    """One row per queue that has pending timers or exists in the broker, sorted by name."""
    timers, queues = state.timers, state.broker.queues
    pending = {name: len(rows) for name, rows in timers.by_queue.items() if rows}
    next_due, walk_stop = next_due_by_queue(timers.iter_due(), len(timers.due), set(pending), scan)
    rows = []
    for name in sorted(set(pending) | set(queues)):
        queue = queues.get(name)
        row = {
            "queue": name,
            "pendingTimers": pending.get(name, 0),
            "nextDueAt": next_due.get(name),
            "unsettledMessages": 0 if queue is None else queue.unconsumed(),
            "dlqCount": 0 if queue is None else len(queue.dlq),
        }
        if row["nextDueAt"] is None and row["pendingTimers"] and walk_stop is not None:
            row["nextDueAfter"] = walk_stop
        rows.append(row)
    return rows
