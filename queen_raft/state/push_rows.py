"""The rows form of a `push` command (docs/commands.md): each item a positional array, not a map.

`{"op": "push", ..., "rows": [[queue, partition, payload, transactionId, messageId, traceId,
encrypted], ...]}` is the push of the same items as maps (`items`), checked and applied as those
maps would be: the same refusals with the same index, the same answers, the same state. Why: a
call of 100 items decodes on every replica in a fraction of the time without a seven-key map per
item, and a tight loop applies it. Entries written with `items` apply as they always did.

The loop keeps, per (queue, partition) the command touches, the queue and partition it found, and
prunes a partition once, when the command first touches it. That is the state `Broker.push_message`
reaches by pruning before every item: within one command `now` is fixed, so a second prune at the
same instant finds nothing more to drop (every entry the command appends expires after `now`, and
a push moves no group's cursor).
"""

from __future__ import annotations

from .broker import Broker
from .message_items import validate_push_item
from .refusal import require

# The fields of a row, in order: the keys of the map form of the same item.
PUSH_ROW_FIELDS = ("queue", "partition", "payload", "transactionId", "messageId", "traceId", "encrypted")
_ROW_LENGTH = len(PUSH_ROW_FIELDS)


def validate_push_rows(rows: object) -> None:
    """Shape of every row, refused as the map of the same fields would be (same code and index)."""
    require(isinstance(rows, list), "bad_request", "rows must be a list")
    for index, row in enumerate(rows):
        # msgpack decodes to exactly these types: the usual row passes on the first test.
        if (type(row) is list and len(row) == _ROW_LENGTH and type(row[0]) is str and row[0] != ""
                and type(row[1]) is str and type(row[2]) is bytes and type(row[3]) is str
                and type(row[4]) is str and (row[5] is None or type(row[5]) is str)
                and type(row[6]) is bool):
            continue
        require(isinstance(row, list) and len(row) == _ROW_LENGTH, "bad_request",
                f"a push row must be an array of {_ROW_LENGTH} fields", index)
        validate_push_item(dict(zip(PUSH_ROW_FIELDS, row)), index)


def push_rows_command(state, command: dict, now: int) -> dict:
    """A push command in the rows form, applied to the tenant state `state` (its broker, its
    `answering` and its billing: each row is one billed message, as each item is)."""
    require("items" not in command, "bad_request", "a push holds items or rows, not both")
    rows = command["rows"]
    validate_push_rows(rows)
    producer_sub = command.get("producerSub")
    require(producer_sub is None or isinstance(producer_sub, str), "bad_request",
            "producerSub must be a string")
    results = push_rows(state.broker, rows, producer_sub, now, state.answering)
    state.billed += len(rows)
    return {"results": results}


def push_rows(broker: Broker, rows: list[list], producer_sub: str | None, now: int,
              answering: bool) -> list[dict]:
    """Applies validated rows; their results in order (none when `answering` is False).

    The steps of `Broker.push_message` and `Partition.append`, inlined (the hot path of a push
    call on every replica): a change there goes here too, as it goes to fire.fire. What a row
    reads of its queue and partition is taken once per run of rows to the same pair
    (`_Target`), not once per row."""
    results: list[dict] = []
    touched: dict[tuple[str, str], _Target] = {}
    last_queue_name = last_partition_name = None
    appended = 0
    for index, (queue_name, partition_name, payload, txn, message_id, trace_id,
                encrypted) in enumerate(rows):
        if queue_name != last_queue_name or partition_name != last_partition_name:
            target = touched.get((queue_name, partition_name))
            if target is None:
                target = touched[(queue_name, partition_name)] = _Target(broker, queue_name, partition_name, now)
            last_queue_name, last_partition_name = queue_name, partition_name
            queue, dedup, max_payload_bytes, max_size = target.queue, target.dedup, target.max_payload_bytes, target.max_size
            expires_at, expiring = target.expires_at, target.expiring
        status, error = "queued", None
        duplicate = dedup.get(txn)
        if duplicate is not None and duplicate[2] > now:
            status, offset, message_id = "duplicate", duplicate[0], duplicate[1]
        elif (len(payload) > max_payload_bytes or max_size) and (error := queue.admit(len(payload))) is not None:
            status, offset = "error", None
        else:
            if target.log is None:
                target.create_partition()
                dedup = target.dedup
            offset = target.next_offset
            target.next_offset = offset + 1
            target.log.append((txn, message_id, payload, now, producer_sub, trace_id, encrypted))
            if expiring is not None:
                dedup[txn] = (offset, message_id, expires_at)
                expiring.append(txn)
            appended += 1
        if answering:
            result = {"index": index, "messageId": message_id, "transactionId": txn,
                      "queue": queue_name, "partition": partition_name, "status": status,
                      "offset": offset}
            if error is not None:
                result["error"] = error
            results.append(result)
    for target in touched.values():
        if target.expiring:  # one expiry entry for all the ids the command appended here
            target.dedup_expiry.append((target.expires_at, target.expiring))
    broker.pushed += appended
    return results


class _Target:
    """One (queue, partition) a push command touches: the queue, and the partition's log and dedup
    index as locals of the loop. The partition is pruned when the command first touches it, and
    created only when a row is appended to it (a push whose rows all fail creates none)."""

    __slots__ = ("queue", "partition_name", "log", "dedup", "dedup_expiry", "next_offset",
                 "max_payload_bytes", "max_size", "expires_at", "expiring")

    def __init__(self, broker: Broker, queue_name: str, partition_name: str, now: int) -> None:
        queue = self.queue = broker.queue(queue_name)
        self.partition_name = partition_name
        self.max_payload_bytes = queue.max_payload_bytes
        self.max_size = queue.max_size
        # The ids appended with a dedup entry, all expiring at `expires_at` (a window of 0 keeps none).
        self.expires_at = now + queue.dedup_window_ms
        self.expiring: list[str] | None = [] if queue.dedup_window_ms > 0 else None
        partition = queue.partitions.get(partition_name)
        if partition is None:
            self.log = self.dedup_expiry = None
            self.dedup = {}  # nothing to find before the partition exists
            self.next_offset = 0
        else:
            partition.prune(now, queue.retention_ms)
            self._take(partition)

    def create_partition(self) -> None:
        self._take(self.queue.partition(self.partition_name))

    def _take(self, partition) -> None:
        self.log = partition.log
        self.dedup = partition.dedup
        self.dedup_expiry = partition.dedup_expiry
        self.next_offset = partition.base + len(partition.log)
