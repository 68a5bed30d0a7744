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
    call on every replica): a change there goes here too, as it goes to fire.fire."""
    results: list[dict] = []
    touched: dict[tuple[str, str], list] = {}
    last_queue_name = last_partition_name = None
    appended = 0
    for index, (queue_name, partition_name, payload, txn, message_id, trace_id,
                encrypted) in enumerate(rows):
        if queue_name != last_queue_name or partition_name != last_partition_name:
            found = touched.get((queue_name, partition_name))
            if found is None:
                queue = broker.queue(queue_name)
                partition = queue.partitions.get(partition_name)
                if partition is not None:
                    partition.prune(now, queue.retention_ms)
                found = touched[(queue_name, partition_name)] = [queue, partition]
            queue, partition = found
            last_queue_name, last_partition_name = queue_name, partition_name
            window_ms = queue.dedup_window_ms
        status, error = "queued", None
        duplicate = None if partition is None else partition.dedup.get(txn)
        if duplicate is not None and duplicate[2] > now:
            status, offset, message_id = "duplicate", duplicate[0], duplicate[1]
        elif (len(payload) > queue.max_payload_bytes or queue.max_size) and \
                (error := queue.admit(len(payload))) is not None:
            status, offset = "error", None
        else:
            if partition is None:
                partition = found[1] = queue.partition(partition_name)
            log = partition.log
            offset = partition.base + len(log)
            log.append((txn, message_id, payload, now, producer_sub, trace_id, encrypted))
            if window_ms > 0:
                partition.dedup[txn] = (offset, message_id, now + window_ms)
                partition.dedup_expiry.append((now + window_ms, txn))
            appended += 1
        if answering:
            result = {"index": index, "messageId": message_id, "transactionId": txn,
                      "queue": queue_name, "partition": partition_name, "status": status,
                      "offset": offset}
            if error is not None:
                result["error"] = error
            results.append(result)
    broker.pushed += appended
    return results
