"""The timer table and its due index (the fire of due timers is fire.py).

Layout, chosen so that ten million pending timers fit a node (see bench/state_bench.py for the
measured bytes):

- A pending timer is stored as one bytes object, its entry (timer_entries.py): dueAt, queue and
  timerKey first, encoded so that bytes order is (dueAt, queue, timerKey) order, then the other
  fields packed. The entry is the due index's element and the value of the queue's key map, one
  object for both, and bytes are never tracked by the cyclic collector, so millions of pending
  timers add nothing to a full collection (docs/performance.md).
- Outside the table a timer is a plain tuple of TIMER_FIELDS, read by the index constants below,
  made from its entry when read (`get`, the fire's `take_due`, listings). What only a failed fire
  changes (attempts, lastError, and deliverAt, which then differs from dueAt) is one `retry`
  field, None until the first failure, then an (attempts, lastError, deliverAt) tuple. Queue
  names, partitions and producerSubs in a tuple are interned. A txn equal to the timerKey is the
  key's own str object.
- `by_queue[queue][timerKey] -> entry` finds a timer; `keys[queue]` (a SortedList of keys) serves
  the keyset listing ordered by timerKey (str order is the order of the UTF-8 bytes); `due` (a
  SortedList of the entries) gives the fire order and `next_due_at`.
- The snapshot holds the entries themselves, in due order, and per queue its keys in key order
  with each key's position in the due order (timer_wire.py): the bytes depend only on the pending
  timers, and a restore builds every index from lists already sorted, in C loops.

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- Peek shows `deliverAt` as scheduled (the fire lag is measured from it) and, in addition,
  `dueAt`, the instant of the next try (later than deliverAt while the timer backs off).
- Schedules already due at their entry fire in that entry, in (dueAt, queue, timerKey) order, after
  all the ops; only those timers fire there (older due timers wait for the next tick), and the
  fire bounds of the policy do not apply (the op count of the entry bounds them).
- A zstd payload is decompressed at the fire with its output bounded by the queue's
  `maxPayloadBytes`; a payload that does not decompress and one that decompresses to more than
  the limit are both permanent failures. An encrypted payload is ciphertext: the proposer must
  not set payloadZstd on it (it would fail to decompress, permanently).
- A transient failure (queue over maxSize) sets `lastError` too, so a peek shows why it waits.
- A timer's DLQ row carries the payload as stored (still compressed when payloadZstd), with
  `payloadZstd` and `timerKey`, under group `__timer__` at offset -1.
"""

from __future__ import annotations

import sys
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import accumulate, islice, takewhile
from operator import methodcaller

from sortedcontainers import SortedList

from . import timer_wire
from .due_runs import F_PAYLOAD, DueRun, runs_of
from .sorted_bulk import drop_first, insert_sorted, remove_sorted
from .timer_entries import due_bytes, due_of, entry_of, make_entry, name_bytes, timer_of

_intern = sys.intern



# A timer's fields, in tuple order.
TIMER_FIELDS = ("due_at", "queue", "key", "partition", "txn", "message_id", "payload",
                "payload_zstd", "encrypted", "producer_sub", "retry", "created_at", "updated_at")
(T_DUE_AT, T_QUEUE, T_KEY, T_PARTITION, T_TXN, T_MESSAGE_ID, T_PAYLOAD, T_PAYLOAD_ZSTD,
 T_ENCRYPTED, T_PRODUCER_SUB, T_RETRY, T_CREATED_AT, T_UPDATED_AT) = range(len(TIMER_FIELDS))
# The retry field, once a fire has failed: (attempts, lastError, deliverAt).
R_ATTEMPTS, R_LAST_ERROR, R_DELIVER_AT = range(3)
# The columns of a format-2 snapshot (timer_wire.py reads them).
WIRE_FIELDS = ("due_at", "queue", "key", "partition", "txn", "message_id", "payload",
               "payload_zstd", "encrypted", "producer_sub", "attempts", "last_error",
               "deliver_at", "created_at", "updated_at")

# A pending timer (see the module docstring): a tuple of TIMER_FIELDS.
Timer = tuple


def peek_timer(timer: Timer) -> dict:
    retry = timer[T_RETRY]
    if retry is None:
        attempts, last_error, deliver_at = 0, None, timer[T_DUE_AT]
    else:
        attempts, last_error, deliver_at = retry
    return {"found": True, "queue": timer[T_QUEUE], "timerKey": timer[T_KEY],
            "partition": timer[T_PARTITION], "deliverAt": deliver_at,
            "dueAt": timer[T_DUE_AT], "txn": timer[T_TXN], "messageId": timer[T_MESSAGE_ID],
            "payload": timer[T_PAYLOAD], "payloadZstd": timer[T_PAYLOAD_ZSTD],
            "encrypted": timer[T_ENCRYPTED], "producerSub": timer[T_PRODUCER_SUB],
            "attempts": attempts, "lastError": last_error, "claimed": False,
            "createdAt": timer[T_CREATED_AT], "updatedAt": timer[T_UPDATED_AT]}


def timer_row(timer: Timer) -> dict:
    """A list row: the peek without the payload."""
    row = peek_timer(timer)
    del row["payload"]
    return row


def _due_prefix(due: SortedList, not_due: bytes, max_count: int) -> list[bytes]:
    """The first entries of `due` below `not_due`, at most `max_count`: whole sublists, then a
    bisect into the first one that holds an entry not due (iterating the SortedList by position
    would build its positional index, which a fire drops again)."""
    found: list[bytes] = []
    for sublist in due._lists:
        room = max_count - len(found)
        if room <= 0:
            break
        if sublist[-1] < not_due and len(sublist) <= room:
            found += sublist
            continue
        found += sublist[:bisect_left(sublist, not_due, 0, min(room, len(sublist)))]
        break
    return found


class TimerTable:
    def __init__(self) -> None:
        self.by_queue: dict[str, dict[str, bytes]] = {}
        self.keys: dict[str, SortedList] = {}
        # The entries (timer_entries.py), in bytes order, which is the fire order.
        self.due = SortedList()
        self.count = 0
        # Entries, and the keys of new timers by queue, upserted but not yet in the sorted indexes.
        self._staged_due: list[bytes] = []
        self._staged_keys: dict[str, list[str]] = {}

    def get(self, queue: str, key: str) -> Timer | None:
        timers = self.by_queue.get(queue)
        entry = None if timers is None else timers.get(key)
        return None if entry is None else timer_of(entry)

    def contains(self, queue: str, key: str) -> bool:
        timers = self.by_queue.get(queue)
        return timers is not None and key in timers

    def insert(self, timer: Timer) -> None:
        queue = _intern(timer[T_QUEUE])
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        entry = timers[timer[T_KEY]] = entry_of(timer)
        self.keys[queue].add(timer[T_KEY])
        self.due.add(entry)
        self.count += 1

    def remove(self, timer: Timer) -> None:
        queue, key = timer[T_QUEUE], timer[T_KEY]
        timers = self.by_queue[queue]
        self.due.remove(timers.pop(key))
        self.keys[queue].remove(key)
        self.count -= 1
        if not timers:
            del self.by_queue[queue]
            del self.keys[queue]

    def _queue_map(self, queue: str) -> dict[str, bytes]:
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        return timers

    def upsert(self, queue: str, key: str, partition: str, deliver_at: int, txn: str,
               message_id: str, payload: bytes, payload_zstd: bool, encrypted: bool,
               producer_sub: str | None, now: int) -> tuple[Timer, bool]:
        """Schedule or replace; returns the timer and whether one was replaced.

        The timer is staged: it is in `by_queue` and counted at once, but enters the due index
        (and, when new, the key index) only at `commit_staged`, sorted and in one pass. Until then
        the caller must not upsert or remove the same (queue, timerKey) again (an entry names each
        one once) nor read the sorted indexes.
        """
        queue = _intern(queue)
        partition = _intern(partition)
        timers = self._queue_map(queue)
        old = timers.get(key)
        created_at = now
        if old is None:
            self._staged_keys.setdefault(queue, []).append(key)
            self.count += 1
        else:
            self.due.remove(old)
            # A reschedule keeps createdAt: the key has been pending since then.
            created_at = timer_of(old, queue, key)[T_CREATED_AT]
        if txn == key:  # one str object for both
            txn = key
        timers[key] = entry = make_entry(due_bytes(deliver_at) + name_bytes(queue), key, partition,
                                         txn, message_id, payload, payload_zstd, encrypted,
                                         producer_sub, None, created_at, now, deliver_at)
        self._staged_due.append(entry)
        return (deliver_at, queue, key, partition, txn, message_id, payload, payload_zstd,
                encrypted, producer_sub, None, created_at, now), old is not None

    def upsert_rows(self, rows: list[list], producer_sub: str | None, now: int,
                    results: list[dict] | None, due_now: list[Timer]) -> int:
        """`upsert` of each schedule row (timer_ops.ROW_FIELDS), staged alike, with its result
        appended to `results` (unless None: nobody reads them) and, when already due, its timer to
        `due_now`; returns the count.

        The same entries and results as one `upsert` per row, in one loop: no call per row, and
        the queue's map and the entry prefix of the previous row reused (a batch names few
        queues and often one delay). A 256-row entry applies on every replica.
        """
        staged_due = self._staged_due
        last_queue = last_partition = timers = staged_keys = None
        last_deliver_at = prefix = None
        added = 0
        for queue, key, partition, delay, txn, message_id, payload, payload_zstd, encrypted in rows:
            deliver_at = now + delay
            if queue != last_queue:
                last_queue = queue = _intern(queue)
                timers = self._queue_map(queue)
                staged_keys = None  # this queue's list of new keys, once it has one
                last_deliver_at = None
            else:
                queue = last_queue
            if partition != last_partition:
                last_partition = _intern(partition)
            if deliver_at != last_deliver_at:
                last_deliver_at = deliver_at
                prefix = due_bytes(deliver_at) + name_bytes(queue)
            old = timers.get(key)
            created_at = now
            if old is None:
                if staged_keys is None:
                    staged_keys = self._staged_keys.setdefault(queue, [])
                staged_keys.append(key)
                status = "scheduled"
                added += 1
            else:
                self.due.remove(old)
                # A reschedule keeps createdAt: the key has been pending since then.
                created_at = timer_of(old, queue, key)[T_CREATED_AT]
                status = "rescheduled"
            timers[key] = entry = make_entry(prefix, key, last_partition, txn, message_id, payload,
                                             payload_zstd, encrypted, producer_sub, None,
                                             created_at, now, deliver_at)
            staged_due.append(entry)
            if deliver_at <= now:
                due_now.append((deliver_at, queue, key, last_partition, key if txn == key else txn,
                                message_id, payload, payload_zstd, encrypted, producer_sub, None,
                                created_at, now))
            if results is not None:
                results.append({"ok": True, "status": status, "queue": queue, "timerKey": key,
                                "txn": txn, "messageId": message_id, "deliverAt": deliver_at})
        self.count += added
        return len(rows)

    def commit_staged(self) -> None:
        """Put the timers staged by `upsert` into the due and key indexes."""
        if self._staged_due:
            self._staged_due.sort()
            insert_sorted(self.due, self._staged_due)
            self._staged_due = []
        if self._staged_keys:
            keys = self.keys
            for queue, staged in self._staged_keys.items():
                staged.sort()
                insert_sorted(keys[queue], staged)
            self._staged_keys = {}

    def next_due_at(self) -> int | None:
        return due_of(self.due[0]) if self.due else None

    def iter_due(self):
        """The pending timers in fire order, each made from its entry as the walk reaches it."""
        return map(timer_of, self.due)

    def take_due(self, now: int, max_count: int, max_bytes: int) -> list[Timer]:
        """`take_due_runs`, as the Timer tuples of its runs."""
        return [timer for run in self.take_due_runs(now, max_count, max_bytes) for timer in run.timers()]

    def take_due_runs(self, now: int, max_count: int, max_bytes: int) -> list[DueRun]:
        """Remove the due timers of one fire, in (dueAt, queue, timerKey) order, as runs of one
        dueAt and queue (timer_entries.DueRun).

        At most `max_count` timers and `max_bytes` of stored payload, but always at least one, so
        a payload larger than the byte bound cannot wedge everything behind it.

        The timers taken are those of a walk that decodes each due entry in turn and stops at the
        first that would pass a bound; it is done in bulk: the due entries (up to `max_count`) are
        a prefix of the index, found by bisecting its sublists, and a payload is shorter than its
        entry, so the run of entries whose lengths sum to at most `max_bytes` is within the byte
        bound whatever their payloads, and is decoded at once (`runs_of`). Only past that run
        (payloads near the bound) are the entries decoded and counted one at a time.
        """
        # An entry begins with its dueAt, biased to sort as bytes: every entry due after `now` is at
        # or past the 8 bytes of now + 1, every entry due by then is below them.
        entries = _due_prefix(self.due, due_bytes(now + 1), max_count)
        if not entries:
            return []
        safe = bisect_right(list(accumulate(map(len, entries))), max_bytes)
        if safe == len(entries):
            runs = runs_of(entries)
            taken = safe
        else:
            runs = runs_of(entries[:safe]) if safe else []
            total = sum(sum(map(len, run.column(F_PAYLOAD))) for run in runs)
            taken = safe
            for entry in islice(entries, safe, None):
                [run] = runs_of([entry])
                size = len(run.column(F_PAYLOAD)[0])
                if taken and total + size > max_bytes:
                    break
                total += size
                taken += 1
                runs.append(run)
        drop_first(self.due, taken)
        self._forget(runs, taken)
        return runs

    def _forget(self, runs: list[DueRun], taken: int) -> None:
        """Remove the runs' timers, already out of the due index, from the key maps, a queue at a
        time. A run's keys ascend (its entries share dueAt and queue, so their bytes order is the
        keys' order); a queue's keys from several runs are sorted together (runs of keys, cheap)."""
        keys_by_queue: dict[str, list[str]] = {}
        merged: set[str] = set()  # the queues with keys from several runs: a list of their own, sorted
        for run in runs:
            queue = run.queue
            gone = keys_by_queue.get(queue)
            if gone is None:
                keys_by_queue[queue] = run.keys  # only read below
                continue
            if queue not in merged:
                merged.add(queue)
                gone = keys_by_queue[queue] = list(gone)
            gone += run.keys
        for queue in merged:
            keys_by_queue[queue].sort()
        by_queue = self.by_queue
        for queue, gone in keys_by_queue.items():
            timers = by_queue[queue]
            # del timers[key] for each key, in C (a deque of length 0 only consumes the map).
            deque(map(timers.__delitem__, gone), 0)
            if timers:
                remove_sorted(self.keys[queue], gone)
            else:
                del by_queue[queue]
                del self.keys[queue]
        self.count -= taken

    def take(self, timers: list[Timer]) -> list[Timer]:
        """Remove the given timers (the due schedules of one entry) in fire order.

        Plain tuple order: an entry names each (queue, timerKey) once, so no two of them compare
        beyond their first three fields.
        """
        ordered = sorted(timers)
        for timer in ordered:
            self.remove(timer)
        return ordered

    def list(self, queue: str, after: str | None, limit: int, prefix: str | None = None) -> dict:
        """One keyset page of the queue's keys after `after`; with `prefix`, of the keys that start
        with it. Those are one run of the sorted keys, from bisect_left(prefix) to the first key
        that does not start with it, so a page reads at most limit + 1 keys of it."""
        keys = self.keys.get(queue)
        if keys is None:
            return {"rows": [], "truncated": False, "nextAfter": None}
        start = 0 if after is None else keys.bisect_right(after)
        if prefix:
            start = max(start, keys.bisect_left(prefix))
            page = list(takewhile(methodcaller("startswith", prefix), keys.islice(start, start + limit + 1)))
        else:
            page = list(keys.islice(start, start + limit + 1))
        truncated = len(page) > limit
        page = page[:limit]
        timers = self.by_queue[queue]
        return {"rows": [timer_row(timer_of(timers[key], queue, key)) for key in page],
                "truncated": truncated,
                "nextAfter": page[-1] if truncated else None}

    def to_wire(self) -> list:
        """The timers as timer_wire.py lays them out (format 3)."""
        return timer_wire.table_to_wire(self)

    @classmethod
    def from_wire(cls, wire, version: int) -> TimerTable:
        """Rebuild from a snapshot's timers of the given snapshot format."""
        table = cls()
        timer_wire.fill_table(table, wire, version)
        return table
