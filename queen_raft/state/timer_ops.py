"""The ops of a `timers` command (and of a transaction's `timers`): validate, check quota, apply.

Validation raises `Refusal` before anything changes; `apply_timer_ops` cannot fail after it.
"""

from __future__ import annotations

from .broker import Refusal, is_int, require
from .limits import DEFAULT_PARTITION
from .timers import Timer, TimerTable

SCHEDULE_OPS = frozenset({"schedule", "reschedule"})


def validate_timer_ops(ops: object, code: str = "timers_bad_request",
                       index_base: int = 0) -> list[dict]:
    """Shape of every op, and no (queue, timerKey) twice; `code` is the refusal's error code."""
    require(isinstance(ops, list), code, "ops must be a list")
    seen: set[tuple[str, str]] = set()
    for position, op in enumerate(ops):
        index = index_base + position
        require(isinstance(op, dict), code, "op must be an object", index)
        kind = op.get("op")
        require(kind in SCHEDULE_OPS or kind == "cancel", code, f"unknown op {kind!r}", index)
        queue, key = op.get("queue"), op.get("timerKey")
        require(isinstance(queue, str) and queue != "" and isinstance(key, str) and key != "",
                code, "queue and timerKey must be non-empty strings", index)
        require((queue, key) not in seen, code, f"({queue!r}, {key!r}) appears twice", index)
        seen.add((queue, key))
        if kind == "cancel":
            require(op.get("txn") is None or isinstance(op["txn"], str), code,
                    "txn must be a string", index)
            continue
        require(is_int(op.get("delayMs")), code, "delayMs must be an integer", index)
        require(isinstance(op.get("txn"), str), code, "txn must be a string", index)
        require(isinstance(op.get("messageId"), str), code, "messageId must be a string", index)
        require(isinstance(op.get("payload"), bytes), code, "payload must be bytes", index)
        require(isinstance(op.get("partition", DEFAULT_PARTITION), str), code,
                "partition must be a string", index)
        require(isinstance(op.get("payloadZstd", False), bool)
                and isinstance(op.get("encrypted", False), bool), code,
                "payloadZstd and encrypted must be booleans", index)
    return ops


def check_quota(table: TimerTable, ops: list[dict], max_pending: object) -> None:
    """Refuse when the batch adds timers and the pending count after it would exceed the quota."""
    if max_pending is None:
        return
    require(is_int(max_pending), "timers_bad_request", "maxPending must be an integer")
    added = removed = 0
    for op in ops:
        exists = table.get(op["queue"], op["timerKey"]) is not None
        if op["op"] == "cancel":
            removed += exists
        elif not exists:
            added += 1
    if added and table.count + added - removed > max_pending:
        raise Refusal("timers_quota_exceeded",
                      f"{table.count + added - removed} pending timers would exceed {max_pending}")


def apply_timer_ops(table: TimerTable, ops: list[dict], producer_sub: str | None,
                    now: int) -> tuple[list[dict], list[Timer], int]:
    """`(results in input order, timers already due, billed schedule ops)`."""
    results = []
    due_now: list[Timer] = []
    billed = 0
    for op in ops:
        queue, key = op["queue"], op["timerKey"]
        if op["op"] == "cancel":
            timer = table.get(queue, key)
            txn = op.get("txn")
            if timer is None:
                results.append({"ok": False, "status": "absent", "queue": queue,
                                "timerKey": key, "txn": txn})
                continue
            table.remove(timer)
            results.append({"ok": True, "status": "cancelled", "queue": queue, "timerKey": key,
                            "txn": timer.txn if txn is None else txn})
            continue
        timer, replaced = table.upsert(
            queue, key, op.get("partition", DEFAULT_PARTITION), op["delayMs"], op["txn"],
            op["messageId"], op["payload"], op.get("payloadZstd", False),
            op.get("encrypted", False), producer_sub, now)
        billed += 1
        if timer.deliver_at <= now:
            due_now.append(timer)
        results.append({"ok": True, "status": "rescheduled" if replaced else "scheduled",
                        "queue": queue, "timerKey": key, "txn": op["txn"],
                        "messageId": op["messageId"], "deliverAt": timer.deliver_at})
    return results, due_now, billed
