"""The timer table in a snapshot, and the reader of the layout before it.

Format 3 (limits.SNAPSHOT_FORMAT_VERSION) is one msgpack value of its own, so its arrays unpack
as the lists the indexes are built from:

    [entries, [[queue, keys, positions], ...]]

- `entries`: every pending timer's entry (timer_entries.py) in due order, which is bytes order;
- per queue, in name order: its keys in key order, and `positions`, the place of each of those
  keys' entries in `entries`, as little-endian uint32s in one bytes value.

Every part is in an order fixed by the pending timers alone, never by a dict's history, so two
replicas that hold the same timers write the same bytes. A restore builds the due index and
each key index from lists already sorted and each key map with one zip: C loops, no Python code
per timer. The snapshot takes one dict of a million entries (object id -> position) to find the
positions.

Formats 1 and 2 hold the timers as columns of WIRE_FIELDS in due order (one list per field);
`fill_table` reads them too, turning each row into its entry (slower: one Python call per
timer, once, at the first restore after an upgrade).
"""

from __future__ import annotations

import sys
from array import array
from itertools import count

import msgpack
from sortedcontainers import SortedList

from .timer_entries import entry_of

_intern = sys.intern
ENTRY_FORMAT = 3
_LITTLE = sys.byteorder == "little"


def _positions_bytes(positions: array) -> bytes:
    if not _LITTLE:
        positions.byteswap()
    return positions.tobytes()


def _positions_of(raw: bytes) -> array:
    positions = array("I")
    positions.frombytes(raw)
    if not _LITTLE:
        positions.byteswap()
    return positions


def table_to_wire(table) -> bytes:
    """The format-3 blob of a TimerTable."""
    entries = list(table.due)
    place = dict(zip(map(id, entries), count()))
    queues = []
    for queue in sorted(table.by_queue):
        keys = list(table.keys[queue])
        timers = table.by_queue[queue]
        positions = array("I", map(place.__getitem__, map(id, map(timers.__getitem__, keys))))
        queues.append([queue, keys, _positions_bytes(positions)])
    return msgpack.packb([entries, queues], use_bin_type=True)


def fill_table(table, blob: bytes, version: int) -> None:
    """Fill an empty TimerTable from a snapshot's timers blob of the given snapshot format."""
    if version < ENTRY_FORMAT:
        _fill_from_columns(table, blob)
        return
    entries, queues = msgpack.unpackb(blob, use_list=True, raw=False)
    for queue, keys, raw_positions in queues:
        queue = _intern(queue)
        positions = _positions_of(raw_positions)
        table.by_queue[queue] = dict(zip(keys, map(entries.__getitem__, positions)))
        table.keys[queue] = _presorted(keys)
    table.due = _presorted(entries)
    table.count = len(entries)


def _presorted(values: list) -> SortedList:
    """A SortedList of values already in order (sorting a sorted list is one linear pass)."""
    return SortedList(values)


def _fill_from_columns(table, blob: bytes) -> None:
    """Formats 1 and 2: columns of (dueAt, queue, key, partition, txn, messageId, payload,
    payloadZstd, encrypted, producerSub, attempts, lastError, deliverAt, createdAt, updatedAt)."""
    columns = msgpack.unpackb(blob, use_list=False, raw=False)
    if not columns:
        return
    (due_ats, queues, keys, partitions, txns, message_ids, payloads, zstds, encrypteds,
     subs, attempts, last_errors, deliver_ats, created, updated) = columns
    retries = map(_retry, attempts, last_errors, deliver_ats, due_ats)
    entries = list(map(entry_of, zip(due_ats, queues, keys, partitions, txns, message_ids,
                                     payloads, zstds, encrypteds, subs, retries, created,
                                     updated)))
    for queue, key, entry in zip(map(_intern, queues), keys, entries):
        timers = table.by_queue.get(queue)
        if timers is None:
            timers = table.by_queue[queue] = {}
        timers[key] = entry
    table.keys = {queue: SortedList(timers) for queue, timers in table.by_queue.items()}
    table.due = _presorted(entries)
    table.count = len(entries)


def _retry(attempts: int, last_error: str | None, deliver_at: int,
           due_at: int) -> tuple | None:
    """The retry field from its columns: None for a timer that never failed (every failure sets
    lastError, so a failed one never has all three at their initial values)."""
    if last_error is None and attempts == 0 and deliver_at == due_at:
        return None
    return (attempts, last_error, deliver_at)

