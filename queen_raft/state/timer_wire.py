"""The timer table in a snapshot, and the readers of the layouts before it.

Formats 3 and 4 (limits.SNAPSHOT_FORMAT_VERSION) lay the table out as one msgpack value whose
arrays unpack as the lists the indexes are built from:

    [entries, [[queue, keys, positions], ...]]

- `entries`: every pending timer's entry (timer_entries.py) in due order, which is bytes order;
- per queue, in name order: its keys in key order, and `positions`, the place of each of those
  keys' entries in `entries`, as little-endian uint32s in one bytes value.

Format 4 writes it inline in the snapshot's array, in pieces (`table_pieces`: a few thousand
entries or keys at a time, see snapshot_codec.py); format 3 wrote it packed whole and nested as
one bin. Every part is in an order fixed by the pending timers alone, never by a dict's history,
so two replicas that hold the same timers write the same bytes. A restore builds the due index and
each key index from lists already sorted and each key map with one zip: C loops, no Python code
per timer.

A key's position is found by bisecting the due index's sublists for its entry (two C bisects per
timer) rather than from a map of every entry to its place: the writer, a forked child, then
allocates nothing in proportion to the timers.

Formats 1 and 2 hold the timers as columns of WIRE_FIELDS in due order (one list per field);
`fill_table` reads them too, turning each row into its entry (slower: one Python call per
timer, once, at the first restore after an upgrade).
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from itertools import accumulate, islice
from operator import itemgetter
from typing import Callable, Iterator

import msgpack
from sortedcontainers import SortedList

from .timer_entries import entry_of

_intern = sys.intern
ENTRY_FORMAT = 3
INLINE_FORMAT = 4
# Entries or keys packed per piece of the stream: a piece is some 100 KiB.
PIECE_ITEMS = 1024
# Keys whose entries one itemgetter call fetches at a restore.
KEY_MAP_CHUNK = 65536
_packb = msgpack.Packer(use_bin_type=True).pack
_packer = msgpack.Packer(use_bin_type=True)
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


def _array_header_size(length: int) -> int:
    """Bytes of msgpack's header of an array of `length` items (fixarray, array 16, array 32)."""
    return 1 if length <= 15 else 3 if length <= 0xFFFF else 5


def _packed_items(values: Iterator, count: int) -> Iterator[bytes]:
    """An array of `count` values in msgpack, header first, packed PIECE_ITEMS at a time."""
    yield _packer.pack_array_header(count)
    while chunk := list(islice(values, PIECE_ITEMS)):
        packed = _packb(chunk)
        yield memoryview(packed)[_array_header_size(len(chunk)):]


def _bin_header(length: int) -> bytes:
    """msgpack's header of a bin of `length` bytes (bin 8, bin 16, bin 32)."""
    if length < 0x100:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 0x10000:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


def _due_place(due) -> Callable[[bytes], int]:
    """The position of an entry in the due index (a SortedList), for entries asked in key order.

    Keys scheduled together in order (one call's `order-1001`, `order-1002`, ... at one dueAt)
    sit side by side in both orders, so the entry after the last one found is tried first; else
    two bisects on the index's sublists (sortedcontainers' `_lists` and `_maxes`, which
    sorted_bulk.py works on too) find it.
    """
    lists, maxes = due._lists, due._maxes
    offsets = list(accumulate(map(len, lists), initial=0))
    last = [0, -1]  # (sublist, index in it) of the entry found last

    def place(entry: bytes) -> int:
        sublist, index = last
        index += 1
        values = lists[sublist] if lists else ()
        if index == len(values) and sublist + 1 < len(lists):
            sublist, index = sublist + 1, 0
            values = lists[sublist]
        if index >= len(values) or values[index] is not entry:
            sublist = bisect_left(maxes, entry)
            index = bisect_left(lists[sublist], entry)
        last[0], last[1] = sublist, index
        return offsets[sublist] + index

    return place


def table_pieces(table) -> Iterator[bytes]:
    """The table's msgpack value (the layout above), in pieces; their concatenation is the value."""
    yield _packer.pack_array_header(2)
    yield from _packed_items(iter(table.due), len(table.due))
    queues = sorted(table.by_queue)
    yield _packer.pack_array_header(len(queues))
    place = _due_place(table.due)
    for queue in queues:
        keys, timers = table.keys[queue], table.by_queue[queue]
        yield _packer.pack_array_header(3) + _packb(queue)
        yield from _packed_items(iter(keys), len(keys))
        yield _bin_header(4 * len(keys))
        ordered = iter(keys)
        while chunk := list(islice(ordered, PIECE_ITEMS)):
            yield _positions_bytes(array("I", map(place, map(timers.__getitem__, chunk))))


def table_to_wire(table) -> bytes:
    """The table's value packed whole (the bytes a format-3 snapshot nested): tests and tools."""
    return b"".join(table_pieces(table))


def fill_table(table, wire, version: int) -> None:
    """Fill an empty TimerTable from a snapshot's timers of the given snapshot format: the value
    itself (format 4) or its packed bytes (formats 1 to 3)."""
    if version < ENTRY_FORMAT:
        _fill_from_columns(table, wire)
        return
    if version < INLINE_FORMAT:
        wire = msgpack.unpackb(wire, use_list=True, raw=False)
    entries, queues = wire
    for queue, keys, raw_positions in queues:
        queue = _intern(queue)
        positions = _positions_of(raw_positions)
        table.by_queue[queue] = _key_map(keys, entries, positions)
        table.keys[queue] = _presorted(keys)
    table.due = _presorted(entries)
    table.count = len(entries)


def _key_map(keys: list, entries: list, positions: array) -> dict:
    """`{key: entries[position]}` in key order. itemgetter fetches a chunk's entries in one C call:
    a third faster than a map of __getitem__ (no int object and call per timer), and a chunk's
    tuple is all it holds besides the map."""
    timers: dict = {}
    for start in range(0, len(keys), KEY_MAP_CHUNK):
        chunk = positions[start:start + KEY_MAP_CHUNK]
        # itemgetter of one position returns the entry itself, not a tuple of it.
        found = itemgetter(*chunk)(entries) if len(chunk) > 1 else [entries[chunk[0]]]
        timers.update(zip(keys[start:start + KEY_MAP_CHUNK], found))
    return timers


def _presorted(values: list) -> SortedList:
    """A SortedList of values already in order, cut into its sublists as SortedList.update cuts
    them, without update's sort (a copy and a comparison per value). Uses sortedcontainers'
    internals as sorted_bulk.py does; the positional index is built on first use."""
    sorted_list = SortedList()
    load = sorted_list._load
    lists = [values[start:start + load] for start in range(0, len(values), load)]
    sorted_list._lists = lists
    sorted_list._maxes = [sublist[-1] for sublist in lists]
    sorted_list._len = len(values)
    return sorted_list


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

