"""A fire's due entries decoded in bulk, as runs of one dueAt and one queue (timer_entries.py has
the layout of an entry).

A tick takes up to a fire batch (4,096 during a backlog) of entries from the front of the due index,
and every replica decodes them all. Decoding one entry at a time (`timer_of`: a slice, a search, a
msgpack call and a 13-field tuple per timer, in Python frames) was a third of a fire's apply. Here
the work is a few C loops over a run:

- The entries that begin with one dueAt and one ended queue name are one slice of the ascending
  list (bytes order keeps a prefix's strings together), ended by the first entry at or past that
  prefix + 0xFF (an escaped NUL there would continue the queue's name: another queue): one bisect.
- Each entry is split once after the prefix, at its key's ending NUL followed by the fields' array
  header (`_KEY_END`); the keys are joined by NULs and decoded with one call, then split. A key
  that holds a NUL (escaped) shows as a NUL inside the joined keys: that run is cut entry by entry.
- The fields of every entry of every run, their array headers left out, go through msgpack in one
  call as one flat array of FIELD_COUNT values per timer, so no tuple is made per timer; a run's
  column of one field is a strided slice of it (`column`).

The fire (fire.py) works on the columns; `timers()` gives the Timer tuples of the general path.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from itertools import repeat
from operator import getitem

import msgpack

from .limits import DEFAULT_PARTITION
from .timer_entries import _DUE_BIAS, _NUL, FIELD_ORDER, _name, _name_end

_intern = sys.intern
_unpackb = msgpack.unpackb
FIELD_COUNT = len(FIELD_ORDER)
(F_PARTITION, F_TXN, F_MESSAGE_ID, F_PAYLOAD, F_PAYLOAD_ZSTD, F_ENCRYPTED, F_PRODUCER_SUB, F_RETRY,
 F_AGE, F_UPDATED_AT) = range(FIELD_COUNT)
# make_entry packs the fields as one fixarray of FIELD_COUNT: its header is this byte.
_FIELDS_HEADER = bytes([0x90 | FIELD_COUNT])
# A key's ending NUL and the fields' header: no key holds it (a key's NUL is escaped as NUL 0xFF).
_KEY_END = _NUL + _FIELDS_HEADER


class DueRun:
    """Due timers of one dueAt and one queue, in key order: their `keys`, and their fields as stored
    (FIELD_ORDER: None for a default partition, a txn equal to the key and an updatedAt equal to
    createdAt; `due_at - created_at` in place of createdAt), FIELD_COUNT values per timer from
    `flat[first]` on."""

    __slots__ = ("due_at", "queue", "keys", "flat", "first")

    def __init__(self, due_at: int, queue: str, keys: list[str], flat: tuple, first: int) -> None:
        self.due_at = due_at
        self.queue = queue
        self.keys = keys
        self.flat = flat
        self.first = first

    def __len__(self) -> int:
        return len(self.keys)

    def column(self, field: int) -> tuple:
        """One field of every timer of the run, in order (`F_...`)."""
        start = self.first + field
        return self.flat[start:start + len(self.keys) * FIELD_COUNT:FIELD_COUNT]

    def timers(self) -> list[tuple]:
        """The run's 13-field Timer tuples, as `timer_of` makes them."""
        due_at, queue = self.due_at, self.queue
        return [(due_at, queue, key, DEFAULT_PARTITION if partition is None else _intern(partition),
                 key if txn is None else txn, message_id, payload, payload_zstd, encrypted,
                 None if producer_sub is None else _intern(producer_sub), retry, due_at - age,
                 due_at - age if updated_at is None else updated_at)
                for key, partition, txn, message_id, payload, payload_zstd, encrypted, producer_sub,
                retry, age, updated_at in zip(self.keys, *map(self.column, range(FIELD_COUNT)))]


def runs_of(entries: list[bytes]) -> list[DueRun]:
    """Ascending entries (a prefix of the due index) as runs of one dueAt and one queue."""
    runs: list[DueRun] = []
    tails: list[bytes] = []
    position, count = 0, len(entries)
    while position < count:
        entry = entries[position]
        queue_end = _name_end(entry, 8)
        start = queue_end + 1
        end = bisect_left(entries, entry[:start] + b"\xff", position + 1)
        keys, run_tails = _keys_and_fields(entries[position:end], start)
        runs.append(DueRun(int.from_bytes(entry[:8], "big") - _DUE_BIAS,
                           _intern(_name(entry[8:queue_end])), keys, (), len(tails) * FIELD_COUNT))
        tails += run_tails
        position = end
    flat = _unpackb(b"\xdd" + (len(tails) * FIELD_COUNT).to_bytes(4, "big") + b"".join(tails),
                    use_list=False, raw=False)
    for run in runs:
        run.flat = flat
    return runs


def timers_of(entries: list[bytes]) -> list[tuple]:
    """`[timer_of(entry) for entry in entries]` for ascending entries, decoded in bulk."""
    return [timer for run in runs_of(entries) for timer in run.timers()]


def _keys_and_fields(run: list[bytes], start: int) -> tuple[list[str], tuple | list]:
    """The timerKeys of entries whose keys begin at `start`, and each entry's packed fields without
    their array header."""
    key_bytes, ends, tails = zip(*map(bytes.partition, map(getitem, run, repeat(slice(start, None))),
                                      repeat(_KEY_END)))
    joined = _NUL.join(key_bytes)
    if joined.count(0) == len(run) - 1 and b"" not in ends:
        return joined.decode("utf-8", "surrogatepass").split("\x00"), tails
    keys, tails = [], []
    for entry in run:  # a key holds an escaped NUL, which the split above cut at
        key_end = _name_end(entry, start)
        if entry[key_end + 1:key_end + 2] != _FIELDS_HEADER:
            raise ValueError("a timer entry's fields are not an array of the stored fields")
        keys.append(_name(entry[start:key_end]))
        tails.append(entry[key_end + 2:])
    return keys, tails
