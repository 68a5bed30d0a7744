"""One partition: an append-only log, its dedup window, and a cursor and lease per consumer group.

Choices the contract leaves open (docs/spec.md lists those that reach the wire); each is
deterministic: it depends only on the entries applied.

- Offsets are gapless from 0 and never reused. The log is a list plus `base`, the offset of its
  first retained message; retention only raises `base`.
- A message is a tuple `(transactionId, messageId, payload, createdAt, producerSub, traceId,
  encrypted)`; its offset is its position plus `base`. Tuples keep a fired timer's message small.
- Dedup window: `transactionId -> (offset, messageId, expiresAt)`, with `expiresAt = createdAt +
  dedupWindowSeconds` fixed when the message is appended (a later `configure` does not move it).
  A deque of `(expiresAt, transactionId)` (or of the ids one push command or one fired run of
  timers appended: `expiry_txns`) in
  append order is pruned whenever an entry touches the
  partition, so the index holds at most one window of pushes. A window of 0 keeps no entries.
  Because the group clock never runs backwards, the deque is ordered unless the window was
  shortened; an entry then waits behind a longer-lived one, but a lookup checks `expiresAt`, so
  only memory, not the answer, is affected.
- Retention (`retentionSeconds` > 0) drops messages older than the window only below the lowest
  cursor of the groups that exist (a message nobody consumed is never dropped), and only in chunks
  of RETENTION_TRIM_CHUNK, so a push does not pay a list shift each time. A group created after a
  trim starts at `base`.
- A group's `cursor` is the lowest offset it has not settled; `settled` holds the settled offsets
  above it (completed out of order, or filed in the DLQ), so they are never delivered again and
  the cursor jumps over them once the gap below closes. `deliveries` counts deliveries per offset
  (the next `deliveryAttempt`), `failures` the retries spent by `failed` acks; both are dropped
  once the cursor passes the offset.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

# Field positions in a message tuple.
MSG_TXN = 0
MSG_ID = 1
MSG_PAYLOAD = 2
MSG_CREATED_AT = 3
MSG_PRODUCER_SUB = 4
MSG_TRACE_ID = 5
MSG_ENCRYPTED = 6

# Retention drops at least this many messages at a time: `del log[:k]` moves the whole list, so
# doing it per push would make a push O(log length).
RETENTION_TRIM_CHUNK = 1024


def _created_at(message: tuple) -> int:
    return message[MSG_CREATED_AT]


def expiry_txns(txns: str | list[str]) -> tuple[str] | list[str]:
    """The transactionIds of one `dedup_expiry` entry: `(expiresAt, transactionId)`, or
    `(expiresAt, [transactionId, ...])` for those one push command appended to the partition
    (push_rows.py: one entry per command, not per message) or one run of fired timers (fire.py).
    A snapshot holds one pair per id."""
    return (txns,) if type(txns) is str else txns


class Lease:
    """The one live lease of a (partition, consumer group); `pending` is what it still covers."""

    __slots__ = ("lease_id", "queue", "partition", "group", "expires_at", "pending", "settled_as")

    def __init__(self, lease_id: str, queue: str, partition: str, group: str, expires_at: int,
                 pending: dict[int, None],
                 settled_as: dict[int, tuple[str, str, bool]] | None = None) -> None:
        self.lease_id = lease_id
        self.queue = queue
        self.partition = partition
        self.group = group
        self.expires_at = expires_at
        # offset -> None, in delivery order (a dict is an ordered set).
        self.pending = pending
        # offset -> (transactionId, status, dlq) of what was acked so far, in ack order: what the
        # broker remembers once the lease is released by its acks (released.py).
        self.settled_as = {} if settled_as is None else settled_as

    def to_wire(self) -> list:
        settled_as = [[offset, *settlement] for offset, settlement in self.settled_as.items()]
        return [self.lease_id, self.expires_at, list(self.pending), settled_as]


class GroupCursor:
    """Where one consumer group stands in one partition."""

    __slots__ = ("cursor", "settled", "deliveries", "failures", "lease")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor
        self.settled: set[int] = set()
        self.deliveries: dict[int, int] = {}
        self.failures: dict[int, int] = {}
        self.lease: Lease | None = None

    def settle(self, offset: int) -> None:
        """Mark an offset done for this group and advance the cursor over every settled offset."""
        if offset < self.cursor or offset in self.settled:
            return
        self.settled.add(offset)
        cursor = self.cursor
        settled = self.settled
        while cursor in settled:
            settled.discard(cursor)
            self.deliveries.pop(cursor, None)
            self.failures.pop(cursor, None)
            cursor += 1
        self.cursor = cursor

    def is_settled(self, offset: int) -> bool:
        return offset < self.cursor or offset in self.settled

    def to_wire(self) -> list:
        return [
            self.cursor,
            sorted(self.settled),
            sorted(self.deliveries.items()),
            sorted(self.failures.items()),
            None if self.lease is None else self.lease.to_wire(),
        ]


class Partition:
    __slots__ = ("name", "base", "log", "dedup", "dedup_expiry", "groups")

    def __init__(self, name: str) -> None:
        self.name = name
        self.base = 0
        self.log: list[tuple] = []
        self.dedup: dict[str, tuple[int, str, int]] = {}
        self.dedup_expiry: deque[tuple[int, str | list[str]]] = deque()
        self.groups: dict[str, GroupCursor] = {}

    @property
    def end(self) -> int:
        """The offset the next message gets."""
        return self.base + len(self.log)

    # --- push ---------------------------------------------------------------------------------

    def find_duplicate(self, txn: str, now: int) -> tuple[int, str, int] | None:
        """The live dedup entry `(offset, messageId, expiresAt)` of a txn, or None."""
        entry = self.dedup.get(txn)
        if entry is not None and entry[2] > now:
            return entry
        return None

    def append(self, message: tuple, dedup_window_ms: int) -> int:
        # fire.py (per timer and per run) and push_rows.push_rows inline these steps (their hot
        # paths): a change here goes there too.
        offset = self.base + len(self.log)
        self.log.append(message)
        if dedup_window_ms > 0:
            expires_at = message[MSG_CREATED_AT] + dedup_window_ms
            txn = message[MSG_TXN]
            self.dedup[txn] = (offset, message[MSG_ID], expires_at)
            self.dedup_expiry.append((expires_at, txn))
        return offset

    def unconsumed(self) -> int:
        """Messages not yet consumed by the slowest group (all retained ones when no group)."""
        if self.groups:
            low = min(group.cursor for group in self.groups.values())
        else:
            low = self.base
        return self.end - low

    # --- upkeep on every entry that touches the partition -------------------------------------

    def prune(self, now: int, retention_ms: int) -> None:
        expiry = self.dedup_expiry
        dedup = self.dedup
        while expiry and expiry[0][0] <= now:
            for txn in expiry_txns(expiry.popleft()[1]):
                entry = dedup.get(txn)
                if entry is not None and entry[2] <= now:
                    del dedup[txn]
        if retention_ms > 0 and self.groups and self.log:
            low = min(group.cursor for group in self.groups.values())
            hi = min(low - self.base, len(self.log))
            count = bisect_right(self.log, now - retention_ms, 0, hi, key=_created_at)
            if count >= RETENTION_TRIM_CHUNK:
                del self.log[:count]
                self.base += count

    # --- consumer groups ------------------------------------------------------------------------

    def group(self, name: str) -> GroupCursor:
        """The group's cursor, created at the first retained offset on first use."""
        cursor = self.groups.get(name)
        if cursor is None:
            cursor = GroupCursor(self.base)
            self.groups[name] = cursor
        return cursor

    def message(self, offset: int) -> tuple | None:
        index = offset - self.base
        if 0 <= index < len(self.log):
            return self.log[index]
        return None


    def offsets_within_bytes(self, offsets: list[int], max_bytes: int) -> list[int]:
        """The first offsets whose payloads sum to at most `max_bytes`, and always the first: a
        pop's answer stays bounded however large its batch, and no message is too large to pop."""
        total = 0
        for count, offset in enumerate(offsets):
            total += len(self.message(offset)[MSG_PAYLOAD])
            if total > max_bytes and count > 0:
                return offsets[:count]
        return offsets
    def deliverable_offsets(self, group: GroupCursor | None, now: int, delay_ms: int,
                            limit: int) -> list[int]:
        """Up to `limit` offsets the group has not settled, from its cursor, visible at `now`.

        A message is visible once `createdAt + delayedProcessing <= now`; createdAt never decreases
        along the log, so the first hidden message ends the scan.
        """
        offset = self.base if group is None else max(group.cursor, self.base)
        settled = () if group is None else group.settled
        log = self.log
        base = self.base
        end = base + len(log)
        visible_until = now - delay_ms
        found: list[int] = []
        while offset < end and len(found) < limit:
            if offset in settled:
                offset += 1
                continue
            if log[offset - base][MSG_CREATED_AT] > visible_until:
                break
            found.append(offset)
            offset += 1
        return found

    # --- snapshot -------------------------------------------------------------------------------

    def to_wire(self) -> list:
        return [
            self.name,
            self.base,
            # msgpack packs a tuple as the array a list packs to: the same bytes without a list per
            # message and per expiry, which a snapshot of a long log spent a third of its time on.
            list(self.log),
            sorted([txn, *entry] for txn, entry in self.dedup.items()),
            [(expires_at, txn) for expires_at, txns in self.dedup_expiry for txn in expiry_txns(txns)],
            sorted([name, cursor.to_wire()] for name, cursor in self.groups.items()),
        ]

    @classmethod
    def from_wire(cls, wire: list, queue: str) -> Partition:
        name, base, log, dedup, expiry, groups = wire
        partition = cls(name)
        partition.base = base
        partition.log = [tuple(message) for message in log]
        partition.dedup = {txn: (offset, mid, exp) for txn, offset, mid, exp in dedup}
        partition.dedup_expiry = deque((exp, txn) for exp, txn in expiry)
        for group_name, (cursor, settled, deliveries, failures, lease) in groups:
            group = GroupCursor(cursor)
            group.settled = set(settled)
            group.deliveries = dict(deliveries)
            group.failures = dict(failures)
            if lease is not None:
                # A snapshot from before the ack memory has no settled_as: nothing is recorded.
                lease_id, expires_at, pending, *rest = lease
                settled_as = {offset: (txn, status, dlq)
                              for offset, txn, status, dlq in (rest[0] if rest else ())}
                group.lease = Lease(lease_id, queue, name, group_name, expires_at,
                                    dict.fromkeys(pending), settled_as)
            partition.groups[group_name] = group
        return partition
