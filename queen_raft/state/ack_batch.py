"""An ack command applied in one pass, and the lease's pending offsets by transactionId that its
items named by transactionId (rather than by offset) are found with.

`Broker.resolve_ack` settles such an item on the first offset, in the lease's delivery order, still
pending under the lease whose message carries that transactionId. Scanning the lease for each item
costs O(batch) per item acked out of delivery order, O(batch^2) for a batch acked in reverse. This
index is built once, at the first item of the command out of order, from the lease as it stands
then (an item in order is the lease's first pending message, read alone); within the command the
lease only loses pending offsets (an ack settles, nothing delivers), so the first offset of a
transactionId's list that is still pending is exactly the offset the scan would find.

The usual command, a consumer acking its whole batch `completed` in delivery order, goes through
`_settle_in_order` first: while each item names, by transactionId, the lease's first pending
message, that message is settled with the lease, partition and group found once for the command
instead of once or twice per item. It is the settle `Broker.settle` makes of such an item (the
lease is live for the whole command: `now` is fixed, and it leaves only when its last message is
settled, where the fast path stops), so the answers and the state are the same; the first item of
another kind hands the rest of the command to the item-by-item path.
"""

from __future__ import annotations

from typing import Any

from .limits import DEFAULT_PARTITION
from .partition import MSG_TXN, Lease, Partition

# The broker (broker.py), which imports this module: not imported back, so no cycle.
Broker = Any


class PendingByTxn:
    __slots__ = ("lease", "offsets")

    def __init__(self) -> None:
        self.lease: Lease | None = None
        self.offsets: dict[str, list[int]] = {}

    def find(self, lease: Lease, partition: Partition, txn: str) -> int | None:
        """The first offset still pending under `lease` whose message carries `txn`, or None."""
        if lease is not self.lease:  # one command acks under one lease; built for another if not
            # Acks in delivery order (the usual batch) name the first pending message each time:
            # that one is read alone, and the index is built only for an item out of order.
            first = next(iter(lease.pending), None)
            message = None if first is None else partition.message(first)
            if message is not None and message[MSG_TXN] == txn:
                return first
            self.lease = lease
            offsets: dict[str, list[int]] = {}
            for pending in lease.pending:
                message = partition.message(pending)
                if message is not None:
                    offsets.setdefault(message[MSG_TXN], []).append(pending)
            self.offsets = offsets
        pending = lease.pending
        for offset in self.offsets.get(txn, ()):
            if offset in pending:
                return offset
        return None


def ack_items(broker: Broker, group_name: str, lease_id: str | None, items: list[dict], now: int,
              answering: bool = True) -> list[dict]:
    """The items' results in order; none when `answering` is False (an unread answer: an item the
    lease does not hold changes nothing, so only its answer is left out)."""
    results: list[dict] = []
    by_txn = PendingByTxn()
    lease = None if lease_id is None else broker.leases.get(lease_id)
    start = 0
    if lease is not None and lease.expires_at > now and lease.group == group_name:
        start = _settle_in_order(broker, lease, items, now, results if answering else None)
    for index in range(start, len(items)):
        item = items[index]
        resolved = broker.resolve_ack(group_name, lease_id, item, now, by_txn)
        if resolved is None:
            if answering:
                results.append(answer_retry(broker, group_name, lease_id, item, index, now))
            continue
        lease, offset = resolved
        filed = broker.settle(lease, offset, item["status"], item.get("error"), now)
        if answering:
            results.append({"index": index, "success": True, "dlq": filed})
    return results


def _settle_in_order(broker: Broker, lease: Lease, items: list[dict], now: int,
                     results: list[dict] | None) -> int:
    """Settle the leading items that ack, `completed` and by transactionId, the live `lease`'s
    first pending message, each in turn; their answers go to `results` (None: unread). Returns the
    index of the first item left to the item-by-item path."""
    partition = broker.queues[lease.queue].partitions[lease.partition]
    group = partition.groups[lease.group]
    pending, settled_as, log, base = lease.pending, lease.settled_as, partition.log, partition.base
    lease_partition, lease_queue = lease.partition, lease.queue
    for index, item in enumerate(items):
        if (item["status"] != "completed" or "offset" in item
                or item.get("partition", DEFAULT_PARTITION) != lease_partition
                or item.get("queue", lease_queue) not in (None, lease_queue)):
            return index
        first = next(iter(pending), None)
        if first is None:  # never for a live lease (it leaves with its last message): no guess here
            return index
        txn = log[first - base][MSG_TXN]  # pending: never trimmed
        if item["transactionId"] != txn:
            return index
        del pending[first]
        group.settle(first)
        settled_as[first] = (txn, "completed", False)
        if results is not None:
            results.append({"index": index, "success": True, "dlq": False})
        if not pending:
            broker.release_acked(lease, group, now)
            return index + 1
    return len(items)


def answer_retry(broker: Broker, group_name: str, lease_id: str | None, item: dict, index: int,
                 now: int) -> dict:
    """The answer to an item its lease does not hold pending: its first answer again when it
    repeats an ack the lease settled (live or remembered), else `invalid_lease`. Reads only."""
    settlement = broker.remembered_settlement(group_name, lease_id, item, now)
    if settlement is None:
        return {"index": index, "success": False, "error": "invalid_lease", "dlq": False}
    _txn, status, filed = settlement
    if status == item["status"]:
        return {"index": index, "success": True, "dlq": filed}
    return {"index": index, "success": False, "error": "invalid_lease", "dlq": False,
            "message": f"already settled as {status}"}
