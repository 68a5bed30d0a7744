"""The ops of a `timers` command (and of a transaction's `timers`): validate, check quota, apply.

An op is a map (one schedule, reschedule or cancel) or a group of schedule rows,
`{"op": "schedule_rows", "rows": [[queue, timerKey, partition, delayMs, txn, messageId, payload,
payloadZstd, encrypted], ...]}` (docs/commands.md): the same schedules as maps, positional. A
256-op call's entry decodes in about half the time (no ten-key map per op), on every replica. The
ops of a command are numbered flat: a group of n rows is n ops, in row order, for a refusal's
`index` and for the results, which are exactly the results of the same schedules as maps.

Validation raises `Refusal` before anything changes; `apply_timer_ops` cannot fail after it.
"""

from __future__ import annotations

from .fired_memory import FiredMemory, record_answer
from .limits import DEFAULT_PARTITION, DEFAULT_QUEUE_OPTIONS, MAX_DELAY_MS
from .queue import Queue
from .refusal import Refusal, is_int, require
from .timers import T_DUE_AT, T_TXN, Timer, TimerTable
from .zstd_bounded import decompress_bounded

SCHEDULE_OPS = frozenset({"schedule", "reschedule"})
SCHEDULE_ROWS = "schedule_rows"
# A schedule row's fields, in order: the names of the same schedule as a map.
ROW_FIELDS = ("queue", "timerKey", "partition", "delayMs", "txn", "messageId", "payload",
              "payloadZstd", "encrypted")
_LIST = {list}  # the type set of a valid group's rows
# On a transaction's cancel: the timer must be pending, or the transaction rolls back. An entry
# without it (every entry written before it existed) applies exactly as it always did.
REQUIRE_PENDING = "requirePending"
TIMER_NOT_PENDING = "timer_not_pending"
# On a `timers` or `transaction` command: refuse a schedule whose payload its destination queue
# would refuse at the fire. An entry without it (every entry written before it existed) applies
# exactly as it always did, so an old journal replays to the same state.
CHECK_PAYLOAD_BOUND = "checkPayloadBound"
PAYLOAD_TOO_LARGE = "payload_too_large"


def validate_timer_ops(ops: object, code: str = "timers_bad_request",
                       index_base: int = 0) -> list[dict]:
    """Shape of every op, and no (queue, timerKey) twice; `code` is the refusal's error code.

    The hot path of scheduling: the checks are plain type tests, and a message is only built for
    an op that fails them.
    """
    require(isinstance(ops, list), code, "ops must be a list")
    seen: set[tuple[str, str]] = set()
    position = index_base
    for op in ops:
        if type(op) is not dict:
            raise Refusal(code, "op must be an object", position)
        kind = op.get("op")
        if kind == SCHEDULE_ROWS:
            position = _validate_rows(op, seen, code, position)
            continue
        _claim_identity(op.get("queue"), op.get("timerKey"), seen, code, position)
        if kind == "cancel":
            txn = op.get("txn")
            if txn is not None and type(txn) is not str:
                raise Refusal(code, "txn must be a string", position)
            if type(op.get(REQUIRE_PENDING, False)) is not bool:
                raise Refusal(code, "requirePending must be a boolean", position)
            position += 1
            continue
        if (kind not in SCHEDULE_OPS or type(op.get("delayMs")) is not int
                or type(op.get("txn")) is not str or type(op.get("messageId")) is not str
                or type(op.get("payload")) is not bytes
                or type(op.get("partition", DEFAULT_PARTITION)) is not str
                or type(op.get("payloadZstd", False)) is not bool
                or type(op.get("encrypted", False)) is not bool):
            raise Refusal(code, schedule_problem(op), position)
        if not -MAX_DELAY_MS <= op["delayMs"] <= MAX_DELAY_MS:
            raise Refusal(code, f"delayMs must be within +-{MAX_DELAY_MS}", position)
        position += 1
    return ops


def _claim_identity(queue: object, key: object, seen: set[tuple[str, str]], code: str, position: int) -> None:
    """The op's (queue, timerKey), checked and added to `seen`; the same refusals for a map and a row."""
    if type(queue) is not str or type(key) is not str or not queue or not key:
        raise Refusal(code, "queue and timerKey must be non-empty strings", position)
    ident = (queue, key)
    if ident in seen:
        raise Refusal(code, f"({queue!r}, {key!r}) appears twice", position)
    seen.add(ident)


def _validate_rows(group: dict, seen: set[tuple[str, str]], code: str, position: int) -> int:
    """The rows of a schedule_rows group, each checked as the same schedule map would be; returns
    the position after the group. A group that fails `_rows_pass` is walked again, row by row in
    the order of the map checks, for the first refusal and its message."""
    rows = group.get("rows")
    if type(rows) is not list or not rows:
        raise Refusal(code, "schedule_rows: rows must be a non-empty list", position)
    identities = _rows_pass(rows)
    if identities is not None and seen.isdisjoint(identities):
        seen |= identities
        return position + len(rows)
    for row in rows:
        if type(row) is not list or len(row) != len(ROW_FIELDS):
            raise Refusal(code, f"a schedule row is a list of {len(ROW_FIELDS)} fields", position)
        queue, key, partition, delay, txn, message_id, payload, payload_zstd, encrypted = row
        _claim_identity(queue, key, seen, code, position)
        if (type(delay) is not int or type(txn) is not str or type(message_id) is not str
                or type(payload) is not bytes or type(partition) is not str
                or type(payload_zstd) is not bool or type(encrypted) is not bool):
            raise Refusal(code, schedule_problem(row_as_op(row)), position)
        if not -MAX_DELAY_MS <= delay <= MAX_DELAY_MS:
            raise Refusal(code, f"delayMs must be within +-{MAX_DELAY_MS}", position)
        position += 1
    return position


def _rows_pass(rows: list) -> set[tuple[str, str]] | None:
    """The (queue, timerKey)s of the rows when every row passes every check (one `and` chain a
    row, the fastest form: docs/performance.md), else None."""
    if set(map(type, rows)) != _LIST:
        return None
    identities: set[tuple[str, str]] = set()
    add = identities.add
    try:
        for queue, key, partition, delay, txn, message_id, payload, payload_zstd, encrypted in rows:
            if not (type(queue) is str and queue and type(key) is str and key
                    and type(delay) is int and -MAX_DELAY_MS <= delay <= MAX_DELAY_MS
                    and type(txn) is str and type(message_id) is str and type(payload) is bytes
                    and type(partition) is str and type(payload_zstd) is bool
                    and type(encrypted) is bool):
                return None
            add((queue, key))
    except ValueError:  # a row of another length
        return None
    return identities if len(identities) == len(rows) else None


def row_as_op(row: list) -> dict:
    """A schedule row as the schedule map it stands for."""
    return {"op": "schedule", **dict(zip(ROW_FIELDS, row))}


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


def check_required_pending(table: TimerTable, ops: list[dict], index_base: int = 0) -> None:
    """Refuse (timer_not_pending, at the op's flat index) the first cancel with requirePending
    whose timer is not pending: already fired, cancelled, or never scheduled."""
    position = index_base
    for op in ops:
        if op["op"] == SCHEDULE_ROWS:
            position += len(op["rows"])
            continue
        if op["op"] == "cancel" and op.get(REQUIRE_PENDING) and not table.contains(op["queue"], op["timerKey"]):
            raise Refusal(TIMER_NOT_PENDING, f"timer {op['queue']}/{op['timerKey']} is not pending "
                          "(fired, cancelled or never scheduled)", position)
        position += 1


def check_payload_bounds(queues: dict[str, Queue], ops: list[dict], index_base: int = 0) -> None:
    """Refuse (payload_too_large, at the op's flat index) the first schedule whose payload is over
    its destination queue's maxPayloadBytes, measured as the fire measures it: decompressed when
    payloadZstd (the same bounded decompression, so it costs what one fire of it costs), as stored
    (ciphertext) when encrypted. The bound is the queue's options in force when the entry applies,
    or the default options for a queue never configured; a later configure that lowers it leaves
    the timers already pending to fail at their fire, as any message over it would."""
    position = index_base
    last_name = bound = None
    for op in ops:
        kind = op["op"]
        if kind == "cancel":
            position += 1
            continue
        rows = op["rows"] if kind == SCHEDULE_ROWS else (
            (op["queue"], None, None, None, None, None, op["payload"], op.get("payloadZstd", False)),)
        for row in rows:
            name, payload, payload_zstd = row[0], row[6], row[7]
            if name != last_name:
                queue = queues.get(name)
                last_name, bound = name, (DEFAULT_QUEUE_OPTIONS["maxPayloadBytes"] if queue is None
                                          else queue.max_payload_bytes)
            if len(payload) > bound and not payload_zstd:
                raise Refusal(PAYLOAD_TOO_LARGE, f"the payload is {len(payload)} bytes, over the maxPayloadBytes "
                              f"of queue {name!r} ({bound} bytes)", position)
            if payload_zstd and decompress_bounded(payload, bound) == PAYLOAD_TOO_LARGE:
                raise Refusal(PAYLOAD_TOO_LARGE, f"the payload decompresses to more than the maxPayloadBytes "
                              f"of queue {name!r} ({bound} bytes)", position)
            position += 1


def check_quota(table: TimerTable, ops: list[dict], max_pending: object) -> None:
    """Refuse when the batch adds timers and the pending count after it would exceed the quota."""
    if max_pending is None:
        return
    require(is_int(max_pending), "timers_bad_request", "maxPending must be an integer")
    schedules = sum(len(op["rows"]) if op["op"] == SCHEDULE_ROWS else op["op"] != "cancel"
                    for op in ops)
    # The batch adds at most its schedules and removes none or more: within the quota even then,
    # no need to look each one up (the usual case, far from the quota).
    if table.count + schedules <= max_pending:
        return
    added = removed = 0
    for op in ops:
        if op["op"] == SCHEDULE_ROWS:
            added += sum(not table.contains(row[0], row[1]) for row in op["rows"])
            continue
        exists = table.contains(op["queue"], op["timerKey"])
        if op["op"] == "cancel":
            removed += exists
        elif not exists:
            added += 1
    if added and table.count + added - removed > max_pending:
        raise Refusal("timers_quota_exceeded",
                      f"{table.count + added - removed} pending timers would exceed {max_pending}")


def apply_timer_ops(table: TimerTable, ops: list[dict], producer_sub: str | None, now: int,
                    memory: FiredMemory | None = None,
                    answering: bool = True) -> tuple[list[dict], list[Timer], int]:
    """`(results in input order, timers already due, billed schedule ops)`; with answering False
    the results are left out (an empty list: nobody reads them), the ops applied all the same.

    A cancel of a key with no pending timer answers from `memory` when the key fired within its
    queue's dedup window (`fired` or `dead_lettered`, fired_memory.py), else `absent`; a cancel
    that removes a pending timer forgets the key's earlier fire.
    """
    results: list[dict] = []
    row_results = results if answering else None
    due_now: list[Timer] = []
    billed = 0
    for op in ops:
        if op["op"] == SCHEDULE_ROWS:
            billed += table.upsert_rows(op["rows"], producer_sub, now, row_results, due_now)
            continue
        queue, key = op["queue"], op["timerKey"]
        if op["op"] == "cancel":
            results.append(cancel(table, memory, queue, key, op.get("txn"), now))
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


def cancel(table: TimerTable, memory: FiredMemory | None, queue: str, key: str,
           request_txn: str | None, now: int) -> dict:
    """One cancel's answer; the txn the request sent is echoed as `requestTxn` in every answer."""
    timer = table.get(queue, key)
    if timer is not None:
        table.remove(timer)
        if memory is not None:
            memory.forget(queue, key)
        return {"ok": True, "status": "cancelled", "queue": queue, "timerKey": key,
                "txn": timer[T_TXN] if request_txn is None else request_txn,
                "requestTxn": request_txn}
    record = None if memory is None else memory.find(queue, key, now)
    if record is None:
        return {"ok": False, "status": "absent", "queue": queue, "timerKey": key,
                "txn": request_txn, "requestTxn": request_txn}
    return {"ok": False, "queue": queue, "timerKey": key, **record_answer(record),
            "requestTxn": request_txn}
