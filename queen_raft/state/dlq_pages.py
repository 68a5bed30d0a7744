"""One page of a tenant's dead letters, in filing order, after a cursor. A read: nothing here applies.

A row's id is `dlq-<n>`, with n from the tenant-wide counter that `Broker.file_row` increments, so
filing order is n ascending, across queues too. Each queue's `dlq` dict holds its rows in that order:
inserted as filed, removed by a replay, restored in order by `Queue.from_wire`. The cursor is the id
of the last row of the previous page. That row may have been replayed since, so a page starts after
the cursor's n, not at the row: no row is skipped or shown twice while rows are filed or replayed
between pages, and new rows come last.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from itertools import islice
from typing import Iterator, Mapping

from .queue import Queue

# The form of the ids Broker.file_row mints.
DLQ_ID_PREFIX = "dlq-"


def dlq_seq_of(dlq_id: str) -> int | None:
    """n of `dlq-<n>`; None for anything else (not a cursor this tenant's rows could have given)."""
    digits = dlq_id[len(DLQ_ID_PREFIX):] if dlq_id.startswith(DLQ_ID_PREFIX) else ""
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits)


def _ids_after(queue: Queue, after_seq: int) -> Iterator[tuple[int, str, str]]:
    """(n, dlqId, queue name) of the queue's rows filed after n = after_seq, in filing order."""
    ids = list(queue.dlq)
    start = bisect_right(ids, after_seq, key=dlq_seq_of)
    return ((dlq_seq_of(dlq_id), dlq_id, queue.name) for dlq_id in islice(ids, start, None))


def dlq_page(queues: Mapping[str, Queue], queue_name: str | None, after_seq: int, limit: int,
             max_bytes: int | None = None) -> dict:
    """`{rows, truncated, nextAfter}`: the first `limit` rows of one queue (every queue when None)
    filed after n = after_seq (0: from the first), ending early before the row whose payload would
    take the page's payloads past `max_bytes` (a page holds at least one row). truncated: more
    rows follow; nextAfter: the cursor for them (the last row's id), None when nothing follows."""
    names = sorted(queues) if queue_name is None else [queue_name]
    streams = [_ids_after(queues[name], after_seq) for name in names if name in queues and queues[name].dlq]
    page = list(islice(heapq.merge(*streams), limit + 1))
    if max_bytes is not None:
        limit = min(limit, _rows_within(queues, page, max_bytes))
    truncated = len(page) > limit
    page = page[:limit]
    return {"rows": [dict(queues[name].dlq[dlq_id]) for _, dlq_id, name in page], "truncated": truncated,
            "nextAfter": page[-1][1] if truncated else None}


def _rows_within(queues: Mapping[str, Queue], page: list[tuple[int, str, str]], max_bytes: int) -> int:
    """How many of the page's first rows have payloads summing to at most `max_bytes` (at least one)."""
    total = 0
    for count, (_, dlq_id, name) in enumerate(page):
        payload = queues[name].dlq[dlq_id].get("payload")
        total += len(payload) if isinstance(payload, (bytes, bytearray)) else 0
        if total > max_bytes and count > 0:
            return count
    return len(page)
