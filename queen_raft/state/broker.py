"""The message side of a tenant: the push path, pop, ack, leases, configure and the DLQ.

A timer's fire takes the steps of `Broker.push_message` (dedup, then the payload and size limits,
then `Broker.append`; inlined in `fire.fire` for speed), so a fired message and a pushed one are
indistinguishable in the log.

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- An ack needs the `leaseId` of the pop that delivered the message. An item is refused with
  `invalid_lease` when that lease is unknown, expired (`expiresAt <= now`), held by another group,
  for another queue or partition, or does not cover the message (never delivered under it, or
  already acked under it). Once every message of a lease is acked, whatever the status, the lease
  is released.
- A retried ack is idempotent (released.py): a live lease keeps, per message, what it settled it
  as (status and `dlq`), and the broker remembers that of each lease released by its acks, for the
  last MAX_REMEMBERED_SETTLEMENTS messages of the tenant and at most ACK_RETRY_MEMORY_SECONDS
  after the release. An item naming a message its live or remembered lease settled (same
  group, queue and partition, its message by offset or transactionId) answers `success: true`
  with the first answer's `dlq` when its status is the one it was settled as, and changes nothing
  (no cursor, retry count, DLQ row, counter or billing moves: acks are not billed, and a retry
  is not a new ack); with another status it is refused `invalid_lease` with `message: "already
  settled as <status>"`. Leases that expired are not remembered (still `invalid_lease`), and the
  memory only answers: a message redelivered under a new lease is settled by that lease alone.
  A second item of one request naming a message the first settled is such a repeat too.
- Inside a transaction an ack of a remembered lease is refused (`rejected_ack`, "already settled
  as <status> under this lease"), even with the same status: the transaction is all or nothing,
  and passing the ack would apply its kv and timer ops a second time when the whole transaction
  is retried (its pushes alone would make it `duplicate`, but a transaction need not push).
- `completed` settles the message. `failed` spends a retry; when the retries spent exceed
  `retryLimit` the message is filed in the DLQ and settled (`dlq: true`), or just settled when the
  queue has `deadLetterQueue: false`. `retry` leaves it unsettled for the next pop. `dlq` files it
  at once (settled only, without a row, when the queue keeps no DLQ).
- Leases expire lazily: an expired lease is released when a pop, an ack or an extend meets it.
  That is a function of the entries alone, so replicas agree.
- A pop whose `leaseId` is already a lease's id (live or remembered as released) is refused
  (`bad_request`): ids are UUIDv7s minted by the proposer, so this only guards against a broken
  proposer.
- `dlq_replay` pushes the row's payload to its queue and partition with the command's `messageId`
  as both messageId and transactionId (the original txn would be a duplicate inside the dedup
  window), and the row's producerSub; the row is removed only when the push is `queued`.
- Billing (counted in tenant.py): each push item is one billed message whatever its verdict.
  Every appended message (push, fire, replay) counts in `pushed`.
"""

from __future__ import annotations

import sys

from .ack_batch import PendingByTxn, ack_items
from .dlq_pages import dlq_page
from .limits import (
    DEFAULT_PARTITION,
    DEFAULT_QUEUE_OPTIONS,
    MAX_POP_BATCH,
    MS_PER_SECOND,
    TIMER_DLQ_GROUP,
)
from .partition import (
    MSG_CREATED_AT,
    MSG_ENCRYPTED,
    MSG_ID,
    MSG_PAYLOAD,
    MSG_PRODUCER_SUB,
    MSG_TRACE_ID,
    MSG_TXN,
    GroupCursor,
    Lease,
    Partition,
)
from .message_items import ACK_STATUSES, validate_ack_item, validate_push_item
from .queue import Queue, validate_options
from .refusal import is_int, require
from .released import ReleasedLeases, Settlement, find_settlement

# Re-exported: the shape checks of the items the broker takes.
__all__ = ["ACK_STATUSES", "Broker", "validate_ack_item", "validate_push_item"]

class Broker:
    def __init__(self) -> None:
        self.queues: dict[str, Queue] = {}
        # leaseId -> live (or expired, not yet met) lease.
        self.leases: dict[str, Lease] = {}
        # Leases released by their acks, for retried acks (released.py).
        self.released = ReleasedLeases()
        # dlqId -> queue name, for dlq_replay.
        self.dlq_index: dict[str, str] = {}
        self.dlq_seq = 0
        self.pushed = 0

    def queue(self, name: str) -> Queue:
        """The queue, created with default options when missing."""
        queue = self.queues.get(name)
        if queue is None:
            name = sys.intern(name)
            queue = Queue(name)
            self.queues[name] = queue
        return queue

    # --- push -------------------------------------------------------------------------------------

    def append(self, queue: Queue, partition: Partition, message: tuple) -> int:
        self.pushed += 1
        return partition.append(message, queue.dedup_window_ms)

    def push_message(self, queue_name: str, partition_name: str, txn: str, message_id: str,
                     payload: bytes, producer_sub: str | None, trace_id: str | None,
                     encrypted: bool, now: int) -> tuple[str, int | None, str, str | None]:
        """The push path: `(status, offset, messageId, error)`.

        The dedup check comes first: a retried push that was accepted answers `duplicate` even if
        the queue's limits changed since. The queue is created at once, the partition when the
        first message is appended to it.
        """
        queue = self.queue(queue_name)
        partition = queue.partitions.get(partition_name)
        if partition is not None:
            partition.prune(now, queue.retention_ms)
            duplicate = partition.find_duplicate(txn, now)
            if duplicate is not None:
                return "duplicate", duplicate[0], duplicate[1], None
        error = queue.admit(len(payload))
        if error is not None:
            return "error", None, message_id, error
        if partition is None:
            partition = queue.partition(partition_name)
        offset = self.append(queue, partition, (txn, message_id, payload, now, producer_sub,
                                                trace_id, encrypted))
        return "queued", offset, message_id, None

    def push_item(self, item: dict, index: int, producer_sub: str | None, now: int) -> dict:
        queue_name = item["queue"]
        partition_name = item.get("partition", DEFAULT_PARTITION)
        txn = item["transactionId"]
        status, offset, message_id, error = self.push_message(
            queue_name, partition_name, txn, item["messageId"], item["payload"], producer_sub,
            item.get("traceId"), item.get("encrypted", False), now)
        result = {"index": index, "messageId": message_id, "transactionId": txn,
                  "queue": queue_name, "partition": partition_name, "status": status,
                  "offset": offset}
        if error is not None:
            result["error"] = error
        return result

    def check_pushes(self, items: list[dict], now: int) -> None:
        """Refuse a transaction's pushes whole, as appending them in order would fail."""
        planned_txns: set[tuple[str, str, str]] = set()
        planned_per_queue: dict[str, int] = {}
        for index, item in enumerate(items):
            queue_name = item["queue"]
            partition_name = item.get("partition", DEFAULT_PARTITION)
            txn = item["transactionId"]
            queue = self.queues.get(queue_name)
            partition = None if queue is None else queue.partitions.get(partition_name)
            key = (queue_name, partition_name, txn)
            require(key not in planned_txns and (partition is None
                                                  or partition.find_duplicate(txn, now) is None),
                    "duplicate", f"transactionId {txn!r} is a duplicate", index)
            planned_txns.add(key)
            queue = queue or Queue(queue_name)
            error = queue.admit(len(item["payload"]), planned_per_queue.get(queue_name, 0))
            require(error is None, "too_large", f"{error}: queue {queue_name!r}", index)
            planned_per_queue[queue_name] = planned_per_queue.get(queue_name, 0) + 1

    # --- pop --------------------------------------------------------------------------------------

    def live_lease(self, group: GroupCursor | None, now: int) -> Lease | None:
        """The group's lease if still live; an expired one is released here."""
        if group is None or group.lease is None:
            return None
        lease = group.lease
        if lease.expires_at > now:
            return lease
        group.lease = None
        self.leases.pop(lease.lease_id, None)
        return None

    def pop(self, queue_name: str, partition_name: str | None, group_name: str, batch: int,
            lease_id: str, auto_ack: bool, now: int, max_bytes: int | None = None,
            answering: bool = True) -> dict:
        """Takes the lease and delivers; with `answering` False (nobody reads the answer) the
        answer leaves out the messages, and the state is the same."""
        empty = {"leaseId": None, "messages": []}
        queue = self.queues.get(queue_name)
        if queue is None:
            return empty
        batch = min(batch, MAX_POP_BATCH)
        names = queue.partition_names if partition_name is None else [partition_name]
        for name in names:
            partition = queue.partitions.get(name)
            if partition is None:
                continue
            partition.prune(now, queue.retention_ms)
            group = partition.groups.get(group_name)
            if self.live_lease(group, now) is not None:
                continue
            offsets = partition.deliverable_offsets(group, now, queue.delay_ms, batch)
            if not offsets:
                continue
            if max_bytes is not None:
                offsets = partition.offsets_within_bytes(offsets, max_bytes)
            group = partition.group(group_name)
            return self._deliver(queue, partition, group, group_name, offsets, lease_id,
                                 auto_ack, now, answering)
        return empty

    def _deliver(self, queue: Queue, partition: Partition, group: GroupCursor, group_name: str,
                 offsets: list[int], lease_id: str, auto_ack: bool, now: int,
                 answering: bool = True) -> dict:
        message_lease_id = None if auto_ack else lease_id
        messages = []
        deliveries = group.deliveries
        log, base, queue_name, partition_name = partition.log, partition.base, queue.name, partition.name
        for offset in offsets:
            attempt = deliveries.get(offset, 0) + 1
            deliveries[offset] = attempt
            if not answering:
                continue
            message = log[offset - base]  # deliverable: retained
            messages.append({
                "transactionId": message[MSG_TXN], "messageId": message[MSG_ID],
                "queue": queue_name, "partition": partition_name, "offset": offset,
                "leaseId": message_lease_id, "deliveryAttempt": attempt,
                "payload": message[MSG_PAYLOAD], "createdAt": message[MSG_CREATED_AT],
                "consumerGroup": group_name, "encrypted": message[MSG_ENCRYPTED],
                "traceId": message[MSG_TRACE_ID],
            })
        if auto_ack:
            for offset in offsets:
                group.settle(offset)
        else:
            lease = Lease(lease_id, queue.name, partition.name, group_name,
                          now + queue.lease_ms, dict.fromkeys(offsets))
            group.lease = lease
            self.leases[lease_id] = lease
        return {"leaseId": message_lease_id, "messages": messages}

    def deliverable(self, queue_name: str, partition_name: str | None, group_name: str,
                    now: int) -> bool:
        """Would a pop return something at `now`? Reads only: an expired lease counts as free."""
        queue = self.queues.get(queue_name)
        if queue is None:
            return False
        names = queue.partition_names if partition_name is None else [partition_name]
        for name in names:
            partition = queue.partitions.get(name)
            if partition is None:
                continue
            group = partition.groups.get(group_name)
            if group is not None and group.lease is not None and group.lease.expires_at > now:
                continue
            if partition.deliverable_offsets(group, now, queue.delay_ms, 1):
                return True
        return False

    # --- ack --------------------------------------------------------------------------------------

    def resolve_ack(self, group_name: str, lease_id: str | None, item: dict, now: int,
                    by_txn: PendingByTxn | None = None) -> tuple[Lease, int] | None:
        """The lease and offset an ack item settles, or None when the lease does not cover it.
        `by_txn` finds an item named by transactionId without scanning the lease each time."""
        lease = None if lease_id is None else self.leases.get(lease_id)
        if lease is None or lease.expires_at <= now or lease.group != group_name:
            return None
        if item.get("partition", DEFAULT_PARTITION) != lease.partition:
            return None
        if item.get("queue") is not None and item["queue"] != lease.queue:
            return None
        offset = item.get("offset")
        if is_int(offset):
            return (lease, offset) if offset in lease.pending else None
        partition = self.queues[lease.queue].partitions[lease.partition]
        txn = item["transactionId"]
        if by_txn is not None:
            found = by_txn.find(lease, partition, txn)
            return None if found is None else (lease, found)
        for pending in lease.pending:
            message = partition.message(pending)
            if message is not None and message[MSG_TXN] == txn:
                return lease, pending
        return None

    def remembered_settlement(self, group_name: str, lease_id: str | None, item: dict,
                              now: int) -> Settlement | None:
        """What the lease settled the item's message as (the lease live, or released and still
        remembered at `now`), or None when it is not known."""
        released = None if lease_id is None else self.leases.get(lease_id)
        if released is None:
            released = self.released.find(lease_id, now)
        elif released.expires_at <= now:
            return None  # expired: what it settled is not remembered
        if released is None or released.group != group_name:
            return None
        if item.get("partition", DEFAULT_PARTITION) != released.partition:
            return None
        if item.get("queue") is not None and item["queue"] != released.queue:
            return None
        return find_settlement(released, item)

    def settle(self, lease: Lease, offset: int, status: str, error: str | None, now: int) -> bool:
        """Apply one resolved ack; True when the message was filed in the DLQ."""
        queue = self.queues[lease.queue]
        partition = queue.partitions[lease.partition]
        group = partition.groups[lease.group]
        del lease.pending[offset]
        txn = partition.log[offset - partition.base][MSG_TXN]  # pending: never trimmed
        filed = False
        if status == "completed":
            group.settle(offset)
        elif status == "failed":
            spent = group.failures.get(offset, 0) + 1
            group.failures[offset] = spent
            if spent > queue.retry_limit:
                filed = self._file_message(queue, partition, group, lease.group, offset,
                                           error or "retry limit exceeded", spent, now)
                group.settle(offset)
        elif status == "dlq":
            filed = self._file_message(queue, partition, group, lease.group, offset,
                                       error or "sent to DLQ", group.failures.get(offset, 0), now)
            group.settle(offset)
        # "retry": nothing settles; the message is delivered again by the next pop.
        lease.settled_as[offset] = (txn, status, filed)
        if not lease.pending:
            self.release_acked(lease, group, now)
        return filed

    def release_acked(self, lease: Lease, group: GroupCursor, now: int) -> None:
        """Release a lease whose every message was acked, remembering what they settled as."""
        group.lease = None
        del self.leases[lease.lease_id]
        self.released.remember(lease, now)

    def ack(self, group_name: str, lease_id: str | None, items: list[dict], now: int,
            answering: bool = True) -> list[dict]:
        """An ack command's items applied in order (ack_batch.py)."""
        return ack_items(self, group_name, lease_id, items, now, answering)

    def extend(self, lease_id: str, seconds: int, now: int) -> dict:
        lease = self.leases.get(lease_id)
        if lease is None:
            return {"error": "invalid_lease", "message": "unknown lease"}
        group = self.queues[lease.queue].partitions[lease.partition].groups[lease.group]
        if self.live_lease(group, now) is None:
            return {"error": "invalid_lease", "message": "lease expired"}
        lease.expires_at = now + seconds * MS_PER_SECOND
        return {"ok": True, "leaseId": lease_id, "expiresAt": lease.expires_at}

    # --- configure --------------------------------------------------------------------------------

    def configure(self, queue_name: str, options: object, mode: str) -> dict:
        queue = self.queues.get(queue_name)
        base = queue.options if (queue is not None and mode == "merge") else None
        merged = validate_options(options, DEFAULT_QUEUE_OPTIONS if base is None else base)
        if isinstance(merged, str):
            return {"error": "bad_request", "message": merged}
        self.queue(queue_name).set_options(merged)
        return {"queue": queue_name, "options": dict(merged)}

    # --- DLQ --------------------------------------------------------------------------------------

    def file_row(self, queue: Queue, partition_name: str, group_name: str, offset: int, txn: str,
                 message_id: str, payload: bytes, created_at: int, producer_sub: str | None,
                 trace_id: str | None, encrypted: bool, error: str, attempts: int, now: int,
                 timer_key: str | None = None, payload_zstd: bool = False) -> str:
        self.dlq_seq += 1
        dlq_id = f"dlq-{self.dlq_seq}"
        queue.dlq[dlq_id] = {
            "dlqId": dlq_id, "queue": queue.name, "partition": partition_name,
            "consumerGroup": group_name, "offset": offset, "transactionId": txn,
            "messageId": message_id, "payload": payload, "payloadZstd": payload_zstd,
            "createdAt": created_at, "producerSub": producer_sub, "traceId": trace_id,
            "encrypted": encrypted, "error": error, "attempts": attempts, "failedAt": now,
            "timerKey": timer_key,
        }
        self.dlq_index[dlq_id] = queue.name
        return dlq_id

    def _file_message(self, queue: Queue, partition: Partition, group: GroupCursor,
                      group_name: str, offset: int, error: str, attempts: int, now: int) -> bool:
        if not queue.dlq_enabled:
            return False
        message = partition.message(offset)
        self.file_row(queue, partition.name, group_name, offset, message[MSG_TXN],
                      message[MSG_ID], message[MSG_PAYLOAD], message[MSG_CREATED_AT],
                      message[MSG_PRODUCER_SUB], message[MSG_TRACE_ID], message[MSG_ENCRYPTED],
                      error, attempts, now)
        return True

    def dlq_replay(self, dlq_id: str, message_id: str, now: int) -> dict:
        queue_name = self.dlq_index.get(dlq_id)
        if queue_name is None:
            return {"error": "not_found", "message": f"no DLQ row {dlq_id!r}"}
        queue = self.queues[queue_name]
        row = queue.dlq[dlq_id]
        if row["consumerGroup"] == TIMER_DLQ_GROUP:
            return {"error": "dlq_replay_refused",
                    "message": "a timer's DLQ row never had a group or a position"}
        status, offset, replay_id, error = self.push_message(
            queue_name, row["partition"], message_id, message_id, row["payload"],
            row["producerSub"], row["traceId"], row["encrypted"], now)
        if status == "queued":
            del queue.dlq[dlq_id]
            del self.dlq_index[dlq_id]
        result = {"index": 0, "messageId": replay_id, "transactionId": message_id,
                  "queue": queue_name, "partition": row["partition"], "status": status,
                  "offset": offset}
        if error is not None:
            result["error"] = error
        return result

    def dlq_rows(self, queue_name: str | None, after_seq: int, limit: int, max_bytes: int | None = None) -> dict:
        """One page of dead letters in filing order (dlq_pages.py)."""
        return dlq_page(self.queues, queue_name, after_seq, limit, max_bytes)

    # --- snapshot -----------------------------------------------------------------------------

    def to_wire(self) -> list:
        return [self.dlq_seq, self.pushed, [self.queues[name].to_wire() for name in sorted(self.queues)],
                self.released.to_wire()]

    @classmethod
    def from_wire(cls, wire: list) -> Broker:
        # A snapshot from before the ack memory has no fourth part: nothing is remembered.
        dlq_seq, pushed, queues, *rest = wire
        broker = cls()
        broker.dlq_seq = dlq_seq
        broker.pushed = pushed
        if rest:
            broker.released = ReleasedLeases.from_wire(rest[0])
        for queue_wire in queues:
            queue = Queue.from_wire(queue_wire)
            broker.queues[queue.name] = queue
            for dlq_id in queue.dlq:
                broker.dlq_index[dlq_id] = queue.name
            for partition in queue.partitions.values():
                for group in partition.groups.values():
                    if group.lease is not None:
                        broker.leases[group.lease.lease_id] = group.lease
        return broker

