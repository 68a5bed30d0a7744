"""The bounded memory of fired timers, so a cancel or a peek that comes after the fire can say
where the message went instead of `absent`.

When a timer fires, the state remembers `(queue, timerKey) -> where its message is`: the txn,
partition, offset and messageId of the message that holds its txn, and the instant of the fire
(`firedAt`). A fire that was a duplicate of a message still in the dedup window remembers that
message (its offset and messageId): it is where the txn is. A timer whose last failed fire filed
it in the `__timer__` DLQ is remembered as dead-lettered, with its `dlqId` in place of an offset.

Bounds (both deterministic, so every replica forgets the same fires at the same entry):

- Time: a fire is remembered for the destination queue's `dedupWindowSeconds` from the fire (for
  an appended message, exactly as long as its dedup entry lives). It expires at `firedAt + window`
  on the group clock (the entry's `now`), and is dead from that instant on, as a dedup entry is.
  A queue with a window of 0 remembers no fires: cancels answer `absent`.
- Count: at most MAX_REMEMBERED_FIRES fire records per tenant (limits.py); the oldest go first.
  A record superseded by a later fire of the same key, or forgotten by a cancel of the key's later
  timer, keeps its place in the order (and in the count) until the bound or its expiry takes it
  from the front: removing it from the middle would cost O(n). So at most that many keys answer
  `fired`, often fewer.

The records live in fire order in a deque (the eviction order) and by key in a map per queue (the
answers). A record's expiry is fixed at its fire: configuring the queue's window later does not
move it, as it does not move a dedup entry's. Reads check the expiry against the group clock, so a
record that expired but is not yet at the front of the order answers nothing.

The key maps are built lazily. A fire only appends its records to the order; the maps take in the
records appended since they were last brought up to date when something asks them: a lookup, a
forget, the snapshot. A drain of a million timers with nobody asking therefore pays no dict insert
into a map of a quarter million keys per fire (about a fifth of a fire's apply). A run of fires
appended whole (fire.py) is not even made into tuples until then: it is kept as one FireRun, the
run's own columns (its keys, txns, offsets and messageIds), which the count bound drops in part or
whole and the expiry whole (a run shares one instant and one window); `index_tail` turns the runs
it reaches into their records. Which records are kept never depends on the maps (the trim drops by count and
expiry only), and a map brought up to date holds, per key, the latest record of the order that no
later forget removed, whenever that happens: so a read on one replica, which updates that
replica's maps, changes nothing another replica would answer or write in a snapshot.

A cancel that removes a pending timer forgets the key's earlier fire: the key's latest event is
then the cancel, and a second cancel answers `absent`. A reschedule keeps it, but a pending timer
always answers first.

The memory is in the snapshot, every record in order with whether it is still the key's answer,
so a restored replica forgets the same records at the same entries as one that never restarted.
"""

from __future__ import annotations

from collections import deque
from itertools import islice, repeat

from . import limits

# A record: a plain tuple of atoms (untracked by the cyclic collector, like a timer). `where` is
# the message's offset (int) for a fire, the DLQ row's id (str) for a dead-lettered timer. Its
# strings and ints are the objects the fire already made (the txn and messageId the log holds, the
# interned names, the offset and expiry the dedup entry holds), so a record allocates its tuple and
# its two slots only.
RECORD_FIELDS = ("fired_at", "expires_at", "queue", "key", "partition", "txn", "where", "message_id")
(F_FIRED_AT, F_EXPIRES_AT, F_QUEUE, F_KEY, F_PARTITION, F_TXN, F_WHERE,
 F_MESSAGE_ID) = range(len(RECORD_FIELDS))

FIRED = "fired"
DEAD_LETTERED = "dead_lettered"


def record_answer(record: tuple) -> dict:
    """The fields a cancel or a peek answers for a remembered record (docs/api.md)."""
    where = record[F_WHERE]
    answer = {"status": FIRED if type(where) is int else DEAD_LETTERED, "txn": record[F_TXN],
              "partition": record[F_PARTITION], "messageId": record[F_MESSAGE_ID],
              "firedAt": record[F_FIRED_AT]}
    if type(where) is int:
        answer["offset"] = where
    else:
        answer["dlqId"] = where
    return answer


class FireRun:
    """The records of a run of fires appended whole (fire.py), kept as the run's columns until the
    key maps need them as tuples (`records`): one fire, one instant, one queue and partition, so one
    expiry. `start`: how many of its first records the count bound has dropped already."""

    __slots__ = ("fired_at", "expires_at", "queue", "partition", "keys", "txns", "offsets",
                 "message_ids", "start")

    def __init__(self, fired_at: int, expires_at: int, queue: str, partition: str, keys: list,
                 txns: list, offsets: list, message_ids: tuple) -> None:
        self.fired_at, self.expires_at, self.queue, self.partition = fired_at, expires_at, queue, partition
        self.keys, self.txns, self.offsets, self.message_ids = keys, txns, offsets, message_ids
        self.start = 0

    def __len__(self) -> int:
        return len(self.keys) - self.start

    def records(self) -> list[tuple]:
        start = self.start
        return list(zip(repeat(self.fired_at), repeat(self.expires_at), repeat(self.queue),
                        islice(self.keys, start, None), repeat(self.partition),
                        islice(self.txns, start, None), islice(self.offsets, start, None),
                        islice(self.message_ids, start, None)))


class FiredMemory:
    __slots__ = ("by_queue", "order", "indexed", "size")

    def __init__(self) -> None:
        # queue -> timerKey -> the record that answers for the key, for the first `indexed`
        # records of the order; the records after them are not in these maps yet (`index_tail`).
        self.by_queue: dict[str, dict[str, tuple]] = {}
        # Every record kept, in fire order (firedAt never decreases along it): a tuple each, but
        # past the first `indexed` records, where a FireRun may hold a run's records until
        # `index_tail` turns them into tuples.
        self.order: deque[tuple | FireRun] = deque()
        self.indexed = 0
        self.size = 0  # records kept

    def __len__(self) -> int:
        return self.size

    def remember(self, record: tuple) -> None:
        """Adds a record; call `trim` after the fire that made it (the bound holds between entries)."""
        self.order.append(record)
        self.size += 1

    def remember_run(self, run: FireRun) -> None:
        """Adds a run's records, as `remember` of each would."""
        self.order.append(run)
        self.size += len(run)

    def index_tail(self) -> None:
        """File the records appended since the last call under their keys, oldest first, so a later
        fire of a key replaces an earlier one. O(records appended since)."""
        order = self.order
        fresh = self.size - self.indexed
        if not fresh:
            return
        tail: list[tuple] = []
        while len(tail) < fresh:  # the fresh items, runs made tuples, taken off the end and put back
            item = order.pop()
            tail += reversed(item.records()) if type(item) is FireRun else (item,)
        tail.reverse()
        order.extend(tail)
        by_queue = self.by_queue
        queue = answers = None
        for record in tail:
            if record[F_QUEUE] is not queue:
                queue = record[F_QUEUE]
                answers = by_queue.get(queue)
                if answers is None:
                    answers = by_queue[queue] = {}
            answers[record[F_KEY]] = record
        self.indexed = self.size

    def find(self, queue: str, key: str, clock: int) -> tuple | None:
        """The key's live record at `clock`, or None."""
        self.index_tail()
        answers = self.by_queue.get(queue)
        record = None if answers is None else answers.get(key)
        if record is None or record[F_EXPIRES_AT] <= clock:
            return None
        return record

    def forget(self, queue: str, key: str) -> None:
        self.index_tail()
        answers = self.by_queue.get(queue)
        if answers is not None and answers.pop(key, None) is not None and not answers:
            del self.by_queue[queue]

    def trim(self, now: int) -> None:
        """Drop from the front every record over the count bound or expired at `now`, and take it
        out of its key map if it still answers there. Each record is dropped once: O(1) amortized
        per fire. The front is mostly one queue's fires in a row (interned names): its key map is
        looked up once per run."""
        order = self.order
        by_queue = self.by_queue
        # Read at call time, not imported by value, so a test can lower the bound to watch eviction.
        bound = limits.MAX_REMEMBERED_FIRES
        queue = answers = None
        while order:
            oldest = order[0]
            if type(oldest) is FireRun:  # past every filed record: nothing to take out of a map
                if self.size > bound and oldest.expires_at > now and len(oldest) > self.size - bound:
                    oldest.start += self.size - bound
                    self.size = bound
                    return
                if self.size <= bound and oldest.expires_at > now:
                    return
                order.popleft()
                self.size -= len(oldest)
                continue
            if self.size <= bound and oldest[F_EXPIRES_AT] > now:
                return
            order.popleft()
            self.size -= 1
            if not self.indexed:  # never filed: no key map names it
                continue
            self.indexed -= 1
            if oldest[F_QUEUE] is not queue:
                queue = oldest[F_QUEUE]
                answers = by_queue.get(queue)
            key = oldest[F_KEY]
            if answers is not None and answers.get(key) is oldest:
                del answers[key]
                if not answers:
                    del by_queue[queue]
                    answers = None

    def is_live(self, record: tuple) -> bool:
        self.index_tail()
        answers = self.by_queue.get(record[F_QUEUE])
        return answers is not None and answers.get(record[F_KEY]) is record

    def to_wire(self) -> list:
        """Every record in order, each with whether it still answers for its key."""
        self.index_tail()
        return [[*record, self.is_live(record)] for record in self.order]

    @classmethod
    def from_wire(cls, wire: list) -> FiredMemory:
        memory = cls()
        for row in wire:
            *fields, live = row
            record = tuple(fields)
            memory.order.append(record)
            memory.size += 1
            if live:
                memory.by_queue.setdefault(record[F_QUEUE], {})[record[F_KEY]] = record
        memory.indexed = len(memory.order)
        return memory
