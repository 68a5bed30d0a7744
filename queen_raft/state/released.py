"""The bounded memory of leases released by their acks, so that a retried ack is idempotent.

A client that lost the answer of an ack (timeout, leader change) sends it again. When the first
attempt settled the last message of its lease, the lease is gone and the retry would be refused
`invalid_lease`: the client could not tell "settled by my own first try" from "my lease expired
and somebody else has the message". So when a lease is released because every message of it was
acked, the broker remembers, per message, what it was settled as: `offset -> (transactionId,
status, dlq)`, under the lease's id, queue, partition and group. A later ack naming that lease
answers from this memory and changes nothing (see broker.py).

Only a release by acks is remembered: a lease that expired is never recorded, so an ack of it
stays `invalid_lease`, and a message that was redelivered under a new lease can never be settled
through the old one (the memory only answers, it never settles).

A lease still live answers the same way from what it settled so far (`Lease.settled_as`): a
client that pops a batch and acks its messages one by one can retry each ack while the lease still
holds the others.

Two bounds, both deterministic (functions of the entries alone):

- Count: at most MAX_REMEMBERED_SETTLEMENTS messages (limits.py) over all the remembered leases of
  the tenant; the oldest released leases are forgotten first, whole, in release order. The count
  is what bounds memory and snapshot size whatever the traffic.
- Time: a released lease is remembered for ACK_RETRY_MEMORY_SECONDS from its release, on the group
  clock (the entry's `now`, which never goes back). At release its `expires_at` is set to the end
  of that memory (the lease itself is over, so the slot is free to mean this): a lookup at or after
  that instant finds nothing, and the next release drops it from the front.

Past either bound a retry answers `invalid_lease`, as for a lease nobody remembers; the SDK then
reports the outcome as unknown. Lease ids are minted unique (UUIDv7), so an entry can never answer
for anything but its own lease. Remembering costs O(1) per settled message (amortized: each one is
added and evicted once).

The memory is replicated state: it is in the snapshot, in release order, so replicas and restores
agree on what is remembered and on what is evicted next. A snapshot from before the time bound
holds each released lease's own end in `expires_at`: those are forgotten at that instant.
"""

from __future__ import annotations

from collections import deque

from . import limits
from .partition import Lease
from .refusal import is_int

# A settled message as remembered: (transactionId, status, dlq).
Settlement = tuple[str, str, bool]


def find_settlement(lease: Lease, item: dict) -> Settlement | None:
    """What a released lease settled the message an ack item names as, or None.

    By offset it is one dict lookup; by transactionId it scans the lease's batch (at most
    MAX_POP_BATCH), as the live path does, and only a retry pays it. Two messages of one lease
    share a txn only with a dedup window of 0: the live lease settles the first pending one first,
    so the first settled one answers, as it did for the first attempt's item.
    """
    offset = item.get("offset")
    if is_int(offset):  # as Broker.resolve_ack: an integer offset wins over a txn
        return lease.settled_as.get(offset)
    txn = item["transactionId"]
    for settlement in lease.settled_as.values():
        if settlement[0] == txn:
            return settlement
    return None


def lease_to_wire(lease: Lease) -> list:
    return [lease.lease_id, lease.queue, lease.partition, lease.group, lease.expires_at,
            [[offset, *settlement] for offset, settlement in lease.settled_as.items()]]


def lease_from_wire(wire: list) -> Lease:
    lease_id, queue, partition, group, expires_at, settled = wire
    return Lease(lease_id, queue, partition, group, expires_at, {},
                 {offset: (txn, status, dlq) for offset, txn, status, dlq in settled})


class ReleasedLeases:
    """Released leases by id, oldest first, holding at most MAX_REMEMBERED_SETTLEMENTS messages.

    A released lease is kept as the Lease object itself (nothing pending, `settled_as` full): the
    release allocates nothing new.
    """

    __slots__ = ("by_id", "order", "settlements")

    def __init__(self) -> None:
        self.by_id: dict[str, Lease] = {}
        # Lease ids in release order: a deque pops the oldest in O(1) (a dict's first key is not).
        self.order: deque[str] = deque()
        # Messages remembered over every lease: the quantity the bound is on.
        self.settlements = 0

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, lease_id: str | None) -> Lease | None:
        """The remembered lease of that id, its memory window over or not (the id stays taken)."""
        return None if lease_id is None else self.by_id.get(lease_id)

    def find(self, lease_id: str | None, now: int) -> Lease | None:
        """The remembered lease of that id whose memory window is still open at `now`, or None."""
        released = self.get(lease_id)
        if released is None or released.expires_at <= now:
            return None
        return released

    def remember(self, released: Lease, now: int) -> None:
        released.expires_at = now + limits.ACK_RETRY_MEMORY_SECONDS * limits.MS_PER_SECOND
        self.by_id[released.lease_id] = released
        self.order.append(released.lease_id)
        self.settlements += len(released.settled_as)
        # Read at call time, not imported by value, so a test can lower the bound to watch eviction.
        bound = limits.MAX_REMEMBERED_SETTLEMENTS
        while self.order and (self.settlements > bound
                              or self.by_id[self.order[0]].expires_at <= now):
            oldest = self.by_id.pop(self.order.popleft())
            self.settlements -= len(oldest.settled_as)

    def to_wire(self) -> list:
        return [lease_to_wire(self.by_id[lease_id]) for lease_id in self.order]

    @classmethod
    def from_wire(cls, wire: list) -> ReleasedLeases:
        memory = cls()
        for lease_wire in wire:
            released = lease_from_wire(lease_wire)
            memory.by_id[released.lease_id] = released
            memory.order.append(released.lease_id)
            memory.settlements += len(released.settled_as)
        return memory
