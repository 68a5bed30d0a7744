"""The timer table and its due index (the fire of due timers is fire.py).

Layout, chosen for a million pending timers (see bench/state_bench.py for the measured bytes):

- A timer is a plain tuple of TIMER_FIELDS, read by the index constants below (as a partition's
  messages are). Its first three fields, (dueAt, queue, timerKey), are unique among pending
  timers, so tuple order is the fire order and two timers never compare beyond them: the tuple is
  its own entry in the due index. A plain tuple of strings, ints, bytes, bools and None is
  untracked by CPython's cyclic collector after the first collection it meets, so a million
  pending timers add almost nothing to a full collection, where a tuple subclass would make every
  full collection walk them all (docs/performance.md); a failed timer's retry tuple, itself atoms,
  may take one more collection. A change (a failed fire) is a new
  tuple put back into the table. Queue names, partitions and producerSubs are interned: a million
  timers of one queue share one string. A txn equal to the timerKey (as many clients send, the
  bench among them) is stored as the key's own str object: one string per timer instead of two.
- What only a failed fire changes (attempts, lastError, and deliverAt, which then differs from
  dueAt) is one `retry` field, None until the first failure, then an (attempts, lastError,
  deliverAt) tuple: two tuple slots (16 B) fewer on every timer that never failed.
- `by_queue[queue][timerKey] -> timer` finds a timer; `keys[queue]` (a SortedList of keys) serves
  the keyset listing ordered by timerKey (str order is the order of the UTF-8 bytes); `due` (a
  SortedList of the timers) gives the fire order and `next_due_at`.
- Snapshot columns are WIRE_FIELDS (the layout before the retry field: snapshots stay
  compatible), written in due order: the bytes depend only on the pending timers, never
  on the history of a dict, and a restore rebuilds the due index from an already sorted list.

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
from collections import deque
from itertools import islice, takewhile
from operator import itemgetter, methodcaller

import msgpack
from sortedcontainers import SortedList

from .sorted_bulk import drop_first, insert_sorted, remove_sorted

_intern = sys.intern



# A timer's fields, in tuple order.
TIMER_FIELDS = ("due_at", "queue", "key", "partition", "txn", "message_id", "payload",
                "payload_zstd", "encrypted", "producer_sub", "retry", "created_at", "updated_at")
(T_DUE_AT, T_QUEUE, T_KEY, T_PARTITION, T_TXN, T_MESSAGE_ID, T_PAYLOAD, T_PAYLOAD_ZSTD,
 T_ENCRYPTED, T_PRODUCER_SUB, T_RETRY, T_CREATED_AT, T_UPDATED_AT) = range(len(TIMER_FIELDS))
# The retry field, once a fire has failed: (attempts, lastError, deliverAt).
R_ATTEMPTS, R_LAST_ERROR, R_DELIVER_AT = range(3)
# The snapshot's columns, in order.
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


class TimerTable:
    def __init__(self) -> None:
        self.by_queue: dict[str, dict[str, Timer]] = {}
        self.keys: dict[str, SortedList] = {}
        # The timers themselves, in tuple order: (dueAt, queue, timerKey) first, unique per
        # pending timer, so the order is the fire order.
        self.due = SortedList()
        self.count = 0
        # Timers, and the keys of new timers by queue, upserted but not yet in the sorted indexes.
        self._staged_due: list[Timer] = []
        self._staged_keys: dict[str, list[str]] = {}

    def get(self, queue: str, key: str) -> Timer | None:
        timers = self.by_queue.get(queue)
        return None if timers is None else timers.get(key)

    def insert(self, timer: Timer) -> None:
        queue = timer[T_QUEUE]
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        timers[timer[T_KEY]] = timer
        self.keys[queue].add(timer[T_KEY])
        self.due.add(timer)
        self.count += 1

    def remove(self, timer: Timer) -> None:
        queue, key = timer[T_QUEUE], timer[T_KEY]
        timers = self.by_queue[queue]
        del timers[key]
        self.due.remove(timer)
        self.keys[queue].remove(key)
        self.count -= 1
        if not timers:
            del self.by_queue[queue]
            del self.keys[queue]

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
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        old = timers.get(key)
        if old is None:
            if txn == key:  # one str object for both (see the module docstring)
                txn = key
            timer = timers[key] = (deliver_at, queue, key, _intern(partition), txn, message_id,
                                   payload, payload_zstd, encrypted, producer_sub, None, now,
                                   now)
            staged_keys = self._staged_keys.get(queue)
            if staged_keys is None:
                staged_keys = self._staged_keys[queue] = []
            staged_keys.append(key)
            self._staged_due.append(timer)
            self.count += 1
            return timer, False
        key = old[T_KEY]
        if txn == key:
            txn = key
        self.due.remove(old)
        # A reschedule keeps createdAt: the key has been pending since then.
        timer = timers[key] = (deliver_at, queue, key, _intern(partition), txn, message_id,
                               payload, payload_zstd, encrypted, producer_sub, None,
                               old[T_CREATED_AT], now)
        self._staged_due.append(timer)
        return timer, True

    def upsert_rows(self, rows: list[list], producer_sub: str | None, now: int,
                    results: list[dict] | None, due_now: list[Timer]) -> int:
        """`upsert` of each schedule row (timer_ops.ROW_FIELDS), staged alike, with its result
        appended to `results` (unless None: nobody reads them) and, when already due, its timer to
        `due_now`; returns the count.

        The same timers and results as one `upsert` per row, in one loop: no call per row, and
        the interned queue and partition of the previous row reused (a batch names few). A
        256-row entry applies on every replica; the per-row call and lookups were half its cost.
        """
        by_queue = self.by_queue
        staged_due = self._staged_due
        last_queue = last_partition = timers = staged_keys = None
        added = 0
        for queue, key, partition, delay, txn, message_id, payload, payload_zstd, encrypted in rows:
            if queue != last_queue:
                last_queue = queue = _intern(queue)
                timers = by_queue.get(queue)
                if timers is None:
                    timers = by_queue[queue] = {}
                    self.keys[queue] = SortedList()
                staged_keys = None  # this queue's list of new keys, once it has one
            else:
                queue = last_queue
            if partition != last_partition:
                last_partition = _intern(partition)
            deliver_at = now + delay
            old = timers.get(key)
            if old is None:
                stored_txn = key if txn == key else txn  # one str object for both
                timer = timers[key] = (deliver_at, queue, key, last_partition, stored_txn,
                                       message_id, payload, payload_zstd, encrypted,
                                       producer_sub, None, now, now)
                if staged_keys is None:
                    staged_keys = self._staged_keys.setdefault(queue, [])
                staged_keys.append(key)
                status = "scheduled"
                added += 1
            else:
                stored_key = old[T_KEY]
                stored_txn = stored_key if txn == stored_key else txn
                self.due.remove(old)
                # A reschedule keeps createdAt: the key has been pending since then.
                timer = timers[stored_key] = (deliver_at, queue, stored_key, last_partition,
                                              stored_txn, message_id, payload, payload_zstd,
                                              encrypted, producer_sub, None, old[T_CREATED_AT],
                                              now)
                status = "rescheduled"
            staged_due.append(timer)
            if deliver_at <= now:
                due_now.append(timer)
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
        return self.due[0][0] if self.due else None

    def take_due(self, now: int, max_count: int, max_bytes: int) -> list[Timer]:
        """Remove and return the due timers of one fire, in (dueAt, queue, timerKey) order.

        At most `max_count` timers and `max_bytes` of stored payload, but always at least one, so
        a payload larger than the byte bound cannot wedge everything behind it.
        """
        taken: list[Timer] = []
        total = 0
        # Iterating the SortedList walks its sublists; islice by position would build its index.
        for timer in islice(self.due, max_count):
            if timer[T_DUE_AT] > now:
                break
            size = len(timer[T_PAYLOAD])
            if taken and total + size > max_bytes:
                break
            total += size
            taken.append(timer)
        if taken:
            drop_first(self.due, len(taken))
            self._forget(taken)
        return taken

    def _forget(self, taken: list[Timer]) -> None:
        """Remove timers already out of the due index from the key maps, a queue at a time."""
        queues = set(map(itemgetter(T_QUEUE), taken))
        if len(queues) == 1:  # the usual tick: one queue's backlog
            keys_by_queue = {queues.pop(): list(map(itemgetter(T_KEY), taken))}
        else:
            keys_by_queue = {}
            for timer in taken:
                gone = keys_by_queue.get(timer[T_QUEUE])
                if gone is None:
                    gone = keys_by_queue[timer[T_QUEUE]] = []
                gone.append(timer[T_KEY])
        by_queue = self.by_queue
        for queue, gone in keys_by_queue.items():
            timers = by_queue[queue]
            # del timers[key] for each key, in C (a deque of length 0 only consumes the map).
            deque(map(timers.__delitem__, gone), 0)
            if timers:
                # Due order sorts keys only within one instant: sort (nearly sorted, so cheap).
                gone.sort()
                remove_sorted(self.keys[queue], gone)
            else:
                del by_queue[queue]
                del self.keys[queue]
        self.count -= len(taken)

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
        return {"rows": [timer_row(timers[key]) for key in page], "truncated": truncated,
                "nextAfter": page[-1] if truncated else None}

    def to_wire(self) -> bytes:
        """msgpack of the timers as columns (one list per field), rows in due order.

        Due order makes the bytes depend on the pending timers alone (never on a dict's history)
        and lets `from_wire` build the due index from a sorted list. The timers are the rows, so
        the columns are one transpose in C; a restore gets columns without transposing (the
        slower side: it also builds the objects). The blob is its own msgpack value so it unpacks
        as tuples while the rest of the snapshot keeps lists.
        """
        columns = list(zip(*self.due))
        if columns:
            retries = columns[T_RETRY]
            # Back to WIRE_FIELDS: the retry column as its three, so snapshots keep one format; it
            # adds about 5 % to a million-timer snapshot (docs/performance.md).
            columns[T_RETRY:T_RETRY + 1] = (
                [0 if retry is None else retry[R_ATTEMPTS] for retry in retries],
                [None if retry is None else retry[R_LAST_ERROR] for retry in retries],
                [due_at if retry is None else retry[R_DELIVER_AT]
                 for due_at, retry in zip(columns[T_DUE_AT], retries)])
        return msgpack.packb(columns, use_bin_type=True)

    @classmethod
    def from_wire(cls, blob: bytes) -> TimerTable:
        """Rebuild from columns in due order: the due index is built from a sorted list.

        Column by column with `map` and `zip` (C loops) rather than one Python loop per row: a
        million-timer restore spends most of its time here.
        """
        columns = msgpack.unpackb(blob, use_list=False, raw=False)
        table = cls()
        if not columns:
            return table
        (due_ats, queues, keys, partitions, txns, message_ids, payloads, zstds, encrypteds,
         subs, attempts, last_errors, deliver_ats, created, updated) = columns
        del columns
        queues = list(map(_intern, queues))
        timers = list(zip(due_ats, queues, keys, map(_intern, partitions),
                          map(_shared_text, txns, keys), message_ids,
                          payloads, zstds, encrypteds, map(_intern_optional, subs),
                          map(_retry, attempts, last_errors, deliver_ats, due_ats), created,
                          updated))
        by_queue = table.by_queue
        for queue, key, timer in zip(queues, keys, timers):
            timers_of_queue = by_queue.get(queue)
            if timers_of_queue is None:
                timers_of_queue = by_queue[queue] = {}
            timers_of_queue[key] = timer
        table.due = SortedList(timers)
        table.keys = {queue: SortedList(timers_of_queue)
                      for queue, timers_of_queue in by_queue.items()}
        table.count = len(timers)
        return table


def _intern_optional(name: str | None) -> str | None:
    return name if name is None else _intern(name)


def _shared_text(txn: str, key: str) -> str:
    """txn, as the timerKey object when equal: one str per timer instead of two."""
    return key if txn == key else txn


def _retry(attempts: int, last_error: str | None, deliver_at: int,
           due_at: int) -> tuple | None:
    """The retry field from its snapshot columns: None for a timer that never failed (every
    failure sets lastError, so a failed one never has all three at their initial values)."""
    if last_error is None and attempts == 0 and deliver_at == due_at:
        return None
    return (attempts, last_error, deliver_at)
