"""The ops of a `timers` command (and of a transaction's `timers`): validate, check quota, apply.

Validation raises `Refusal` before anything changes; `apply_timer_ops` cannot fail after it.
"""

from __future__ import annotations

from .limits import DEFAULT_PARTITION, MAX_DELAY_MS
from .refusal import Refusal, is_int, require
from .timers import T_DUE_AT, T_TXN, Timer, TimerTable

SCHEDULE_OPS = frozenset({"schedule", "reschedule"})


def validate_timer_ops(ops: object, code: str = "timers_bad_request",
                       index_base: int = 0) -> list[dict]:
    """Shape of every op, and no (queue, timerKey) twice; `code` is the refusal's error code.

    The hot path of scheduling: the checks are plain type tests, and a message is only built for
    an op that fails them.
    """
    require(isinstance(ops, list), code, "ops must be a list")
    seen: set[tuple[str, str]] = set()
    for position, op in enumerate(ops):
        if type(op) is not dict:
            raise Refusal(code, "op must be an object", index_base + position)
        queue, key = op.get("queue"), op.get("timerKey")
        if type(queue) is not str or type(key) is not str or not queue or not key:
            raise Refusal(code, "queue and timerKey must be non-empty strings",
                          index_base + position)
        ident = (queue, key)
        if ident in seen:
            raise Refusal(code, f"({queue!r}, {key!r}) appears twice", index_base + position)
        seen.add(ident)
        kind = op.get("op")
        if kind == "cancel":
            txn = op.get("txn")
            if txn is not None and type(txn) is not str:
                raise Refusal(code, "txn must be a string", index_base + position)
            continue
        if (kind not in SCHEDULE_OPS or type(op.get("delayMs")) is not int
                or type(op.get("txn")) is not str or type(op.get("messageId")) is not str
                or type(op.get("payload")) is not bytes
                or type(op.get("partition", DEFAULT_PARTITION)) is not str
                or type(op.get("payloadZstd", False)) is not bool
                or type(op.get("encrypted", False)) is not bool):
            raise Refusal(code, schedule_problem(op), index_base + position)
        if not -MAX_DELAY_MS <= op["delayMs"] <= MAX_DELAY_MS:
            raise Refusal(code, f"delayMs must be within +-{MAX_DELAY_MS}", index_base + position)
    return ops


def schedule_problem(op: dict) -> str:
    """What is wrong with a schedule op that failed the fast checks."""
    kind = op.get("op")
    if kind not in SCHEDULE_OPS:
        return f"unknown op {kind!r}"
    for name, kind_of in (("delayMs", "an integer"), ("txn", "a string"),
                          ("messageId", "a string"), ("payload", "bytes")):
        value = op.get(name)
        wanted = {"an integer": int, "a string": str, "bytes": bytes}[kind_of]
        if type(value) is not wanted:
            return f"{name} must be {kind_of}"
    if type(op.get("partition", DEFAULT_PARTITION)) is not str:
        return "partition must be a string"
    return "payloadZstd and encrypted must be booleans"


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
                            "txn": timer[T_TXN] if txn is None else txn})
            continue
        # A scheduled timer's dueAt is its deliverAt (they part only at a failed fire).
        timer, replaced = table.upsert(
            queue, key, op.get("partition", DEFAULT_PARTITION), now + op["delayMs"], op["txn"],
            op["messageId"], op["payload"], op.get("payloadZstd", False),
            op.get("encrypted", False), producer_sub, now)
        billed += 1
        if timer[T_DUE_AT] <= now:
            due_now.append(timer)
        results.append({"ok": True, "status": "rescheduled" if replaced else "scheduled",
                        "queue": queue, "timerKey": key, "txn": op["txn"],
                        "messageId": op["messageId"], "deliverAt": timer[T_DUE_AT]})
    table.commit_staged()
    return results, due_now, billed
