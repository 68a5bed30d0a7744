"""The timer table, its due index, and the fire of due timers through the push path.

Layout, chosen for a million pending timers (see bench/state_bench.py for the measured bytes):

- `Timer` is a `__slots__` object. Its queue, key and due instant live only in `due`, the tuple
  `(dueAt, queue, timerKey)` that is also the entry of the due index, so each is stored once.
  Queue names, partitions and producerSubs are interned: a million timers of one queue share one
  string.
- `by_queue[queue][timerKey] -> Timer` finds a timer; `keys[queue]` (a SortedList of keys) serves
  the keyset listing ordered by timerKey (str order is the order of the UTF-8 bytes); `due` (a
  SortedList of the due tuples) gives the fire order (dueAt, queue, timerKey) and `next_due_at`.

Choices where SPEC.md is silent:

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

import zstandard
from sortedcontainers import SortedList

from .broker import Broker
from .limits import TIMER_DLQ_GROUP, TIMER_DLQ_OFFSET, FirePolicy

_intern = sys.intern


class Timer:
    __slots__ = ("due", "partition", "txn", "message_id", "payload", "payload_zstd", "encrypted",
                 "producer_sub", "attempts", "last_error", "deliver_at", "created_at",
                 "updated_at")

    def __init__(self, due: tuple, partition: str, txn: str, message_id: str, payload: bytes,
                 payload_zstd: bool, encrypted: bool, producer_sub: str | None, attempts: int,
                 last_error: str | None, deliver_at: int, created_at: int,
                 updated_at: int) -> None:
        self.due = due
        self.partition = partition
        self.txn = txn
        self.message_id = message_id
        self.payload = payload
        self.payload_zstd = payload_zstd
        self.encrypted = encrypted
        self.producer_sub = producer_sub
        self.attempts = attempts
        self.last_error = last_error
        self.deliver_at = deliver_at
        self.created_at = created_at
        self.updated_at = updated_at

    def to_wire(self) -> list:
        due_at, queue, key = self.due
        return [queue, key, due_at, self.partition, self.txn, self.message_id, self.payload,
                self.payload_zstd, self.encrypted, self.producer_sub, self.attempts,
                self.last_error, self.deliver_at, self.created_at, self.updated_at]

    def peek(self) -> dict:
        due_at, queue, key = self.due
        return {"found": True, "queue": queue, "timerKey": key, "partition": self.partition,
                "deliverAt": self.deliver_at, "dueAt": due_at, "txn": self.txn,
                "messageId": self.message_id, "payload": self.payload,
                "payloadZstd": self.payload_zstd, "encrypted": self.encrypted,
                "producerSub": self.producer_sub, "attempts": self.attempts,
                "lastError": self.last_error, "claimed": False, "createdAt": self.created_at,
                "updatedAt": self.updated_at}

    def row(self) -> dict:
        """A list row: the peek without the payload."""
        row = self.peek()
        del row["payload"]
        return row


class TimerTable:
    def __init__(self) -> None:
        self.by_queue: dict[str, dict[str, Timer]] = {}
        self.keys: dict[str, SortedList] = {}
        self.due = SortedList()
        self.count = 0

    def get(self, queue: str, key: str) -> Timer | None:
        timers = self.by_queue.get(queue)
        return None if timers is None else timers.get(key)

    def insert(self, timer: Timer) -> None:
        _, queue, key = timer.due
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        timers[key] = timer
        self.keys[queue].add(key)
        self.due.add(timer.due)
        self.count += 1

    def remove(self, timer: Timer) -> None:
        _, queue, key = timer.due
        timers = self.by_queue[queue]
        del timers[key]
        self.due.remove(timer.due)
        keys = self.keys[queue]
        keys.remove(key)
        self.count -= 1
        if not timers:
            del self.by_queue[queue]
            del self.keys[queue]

    def upsert(self, queue: str, key: str, partition: str, deliver_at: int, txn: str,
               message_id: str, payload: bytes, payload_zstd: bool, encrypted: bool,
               producer_sub: str | None, now: int) -> tuple[Timer, bool]:
        """Schedule or replace; returns the timer and whether one was replaced."""
        queue = _intern(queue)
        timers = self.by_queue.get(queue)
        if timers is None:
            timers = self.by_queue[queue] = {}
            self.keys[queue] = SortedList()
        old = timers.get(key)
        if old is None:
            due = (deliver_at, queue, key)
            timer = timers[key] = Timer(due, _intern(partition), txn, message_id, payload,
                                        payload_zstd, encrypted, producer_sub, 0, None,
                                        deliver_at, now, now)
            self.keys[queue].add(key)
            self.due.add(due)
            self.count += 1
            return timer, False
        due = old.due
        if due[0] != deliver_at:
            self.due.remove(due)
            due = (deliver_at, queue, due[2])
            self.due.add(due)
        # A reschedule keeps createdAt: the key has been pending since then.
        timer = timers[key] = Timer(due, _intern(partition), txn, message_id, payload,
                                    payload_zstd, encrypted, producer_sub, 0, None, deliver_at,
                                    old.created_at, now)
        return timer, True

    def next_due_at(self) -> int | None:
        return self.due[0][0] if self.due else None

    def take_due(self, now: int, max_count: int, max_bytes: int) -> list[Timer]:
        """Remove and return the due timers of one fire, in (dueAt, queue, timerKey) order.

        At most `max_count` timers and `max_bytes` of stored payload, but always at least one, so
        a payload larger than the byte bound cannot wedge everything behind it.
        """
        taken: list[Timer] = []
        by_queue = self.by_queue
        total = 0
        for due in self.due.islice(0, max_count):
            if due[0] > now:
                break
            timer = by_queue[due[1]][due[2]]
            size = len(timer.payload)
            if taken and total + size > max_bytes:
                break
            total += size
            taken.append(timer)
        if taken:
            del self.due[:len(taken)]
            for timer in taken:
                _, queue, key = timer.due
                timers = by_queue[queue]
                del timers[key]
                self.keys[queue].remove(key)
                if not timers:
                    del by_queue[queue]
                    del self.keys[queue]
            self.count -= len(taken)
        return taken

    def take(self, timers: list[Timer]) -> list[Timer]:
        """Remove the given timers (the due schedules of one entry) in fire order."""
        timers = sorted(timers, key=lambda timer: timer.due)
        for timer in timers:
            self.remove(timer)
        return timers

    def list(self, queue: str, after: str | None, limit: int) -> dict:
        keys = self.keys.get(queue)
        if keys is None:
            return {"rows": [], "truncated": False, "nextAfter": None}
        start = 0 if after is None else keys.bisect_right(after)
        page = list(keys.islice(start, start + limit + 1))
        truncated = len(page) > limit
        page = page[:limit]
        timers = self.by_queue[queue]
        return {"rows": [timers[key].row() for key in page], "truncated": truncated,
                "nextAfter": page[-1] if truncated else None}

    def to_wire(self) -> list:
        by_queue = self.by_queue
        return [by_queue[queue][key].to_wire() for _, queue, key in self.due]

    @classmethod
    def from_wire(cls, wire: list) -> TimerTable:
        """Rebuild from rows in due order: the indexes are built sorted, not by inserts."""
        table = cls()
        by_queue = table.by_queue
        dues = []
        for (queue, key, due_at, partition, txn, message_id, payload, payload_zstd, encrypted,
             producer_sub, attempts, last_error, deliver_at, created_at, updated_at) in wire:
            queue = _intern(queue)
            due = (due_at, queue, key)
            timers = by_queue.get(queue)
            if timers is None:
                timers = by_queue[queue] = {}
            timers[key] = Timer(due, _intern(partition), txn, message_id, payload, payload_zstd,
                                encrypted, producer_sub if producer_sub is None
                                else _intern(producer_sub), attempts, last_error,
                                due_at if deliver_at == due_at else deliver_at, created_at,
                                updated_at)
            dues.append(due)
        table.due = SortedList(dues)
        table.keys = {queue: SortedList(timers) for queue, timers in by_queue.items()}
        table.count = len(dues)
        return table


def decompress_bounded(payload: bytes, limit: int) -> bytes | str:
    """The decompressed payload, or why it cannot be: corrupt, or larger than `limit`."""
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(payload)
        data = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        return f"payload_zstd: {exc}"
    if len(data) > limit:
        return "payload_too_large"
    return data


class FireTally:
    """The counts of one fire, shaped as the `tick` answer."""

    __slots__ = ("fired", "appended", "duplicate", "failed", "dlq", "lags")

    def __init__(self) -> None:
        self.fired = self.appended = self.duplicate = self.failed = self.dlq = 0
        self.lags: list[int] = []


def fire(timers: list[Timer], table: TimerTable, broker: Broker, policy: FirePolicy,
         now: int) -> FireTally:
    """Push each timer's message through the push path; failures go back into the table."""
    tally = FireTally()
    tally.fired = len(timers)
    lags = tally.lags
    queues = broker.queues
    for timer in timers:
        _, queue_name, key = timer.due
        queue = queues.get(queue_name) or broker.queue(queue_name)
        partition = queue.partitions.get(timer.partition) or queue.partition(timer.partition)
        partition.prune(now, queue.retention_ms)
        txn = timer.txn
        if partition.find_duplicate(txn, now) is not None:
            tally.duplicate += 1
            lags.append(now - timer.deliver_at)
            continue
        payload = timer.payload
        error = None
        transient = False
        if timer.payload_zstd:
            decoded = decompress_bounded(payload, queue.max_payload_bytes)
            if isinstance(decoded, str):
                error = decoded
            else:
                payload = decoded
        if error is None:
            error = queue.admit(len(payload))
            transient = error == "queue_full"
        if error is None:
            broker.append(queue, partition, (txn, timer.message_id, payload, now,
                                             timer.producer_sub, None, timer.encrypted))
            tally.appended += 1
            lags.append(now - timer.deliver_at)
            continue
        timer.last_error = error
        timer.updated_at = now
        if transient:
            due_at = now + policy.transient_backoff_ms
        else:
            timer.attempts += 1
            if timer.attempts >= policy.max_attempts:
                broker.file_row(queue, timer.partition, TIMER_DLQ_GROUP, TIMER_DLQ_OFFSET, txn,
                                timer.message_id, timer.payload, timer.created_at,
                                timer.producer_sub, None, timer.encrypted, error,
                                timer.attempts, now, key, timer.payload_zstd)
                tally.dlq += 1
                continue
            due_at = now + min(policy.backoff_min_ms * 2 ** (timer.attempts - 1),
                               policy.backoff_max_ms)
        tally.failed += 1
        timer.due = (due_at, queue_name, key)
        table.insert(timer)
    return tally
