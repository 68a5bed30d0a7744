"""The body of POST /api/v1/timers (and a transaction's `timers`) parsed into the command's ops:
every shape check of docs/spec.md section 2 in its order, each failure a 400 naming the field.
The routes, gates and answers are in timers.py."""

from __future__ import annotations

import binascii
from operator import itemgetter
from typing import Any, NamedTuple

from queen_raft.api.codec import PayloadDecodeError, decode_base64
from queen_raft.api.errors import ApiError
from queen_raft.api.ids import new_message_ids
from queen_raft.api.requests import JSON_SAFE_INT, is_int
from queen_raft.state.limits import DEFAULT_PARTITION, MAX_NAME_BYTES

BAD_REQUEST = "timers_bad_request"

OPS = ("schedule", "reschedule", "cancel")
# Fields a client may never set: they are attested by the broker (producerSub above all) or
# computed by it. Supplying one is a 400, never a silent drop (docs/spec.md section 2).
SERVER_OWNED_FIELDS = frozenset({
    "producerSub", "messageId", "tenant", "deliverAt", "attempts", "lastError", "claimed", "createdAt", "updatedAt",
})
SCHEDULE_REQUIRED = frozenset({"op", "queue", "timerKey", "delayMs", "txn", "payload"})
SCHEDULE_OPTIONAL = frozenset({"partition", "payloadZstd", "encrypted"})
SCHEDULE_OPS = ("schedule", "reschedule")
SCHEDULE_FIELDS = SCHEDULE_REQUIRED | SCHEDULE_OPTIONAL
# The field-name shortcut of parse_timer_op relies on this: a field set inside SCHEDULE_FIELDS holds no
# server-owned field and no "_" name.
assert not SCHEDULE_FIELDS & SERVER_OWNED_FIELDS and not any(name.startswith("_") for name in SCHEDULE_FIELDS)
# The command's group of schedule rows and a row's fields, in order (docs/commands.md, `timers`).
SCHEDULE_ROWS = "schedule_rows"
ROW_FIELDS = ("queue", "timerKey", "partition", "delayMs", "txn", "messageId", "payload", "payloadZstd", "encrypted")
ROW_QUEUE, ROW_TIMER_KEY, ROW_DELAY_MS, ROW_PAYLOAD = map(ROW_FIELDS.index, ("queue", "timerKey", "delayMs", "payload"))
CANCEL_REQUIRED = frozenset({"op", "queue", "timerKey"})
CANCEL_OPTIONAL = frozenset({"txn", "requirePending"})
# A cancel that must find its timer pending, or the whole transaction rolls back (reason
# timer_not_pending). Only a transaction can roll back, so the standalone route refuses the field.
REQUIRE_PENDING = "requirePending"


# A name of at most this many characters is within MAX_NAME_BYTES whatever they are (UTF-8 takes
# at most 4 bytes a character): the fast path tests lengths only, the checked path encodes.
NAME_CHARS_ALWAYS_WITHIN = MAX_NAME_BYTES // 4


def bad_request(message: str) -> ApiError:
    return ApiError(400, BAD_REQUEST, message)


def name_over_limit(value: str) -> bool:
    """Whether a name (a queue, partition, timerKey, txn, transactionId or consumer group) is over
    MAX_NAME_BYTES of UTF-8 (state/limits.py)."""
    return len(value) > NAME_CHARS_ALWAYS_WITHIN and len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES


def check_name_length(value: str, name: str, where: str) -> str:
    """`value`, or a 400 when it is over MAX_NAME_BYTES (state/limits.py): a timer's queue,
    timerKey, partition and txn are identities, bounded like KV's ns and key."""
    if name_over_limit(value):
        raise bad_request(f"{where}: {name} is over {MAX_NAME_BYTES} bytes (UTF-8)")
    return value


def _non_empty_string(op: dict, name: str, where: str) -> str:
    value = op.get(name)
    if not isinstance(value, str) or value == "":
        raise bad_request(f"{where}: {name} must be a non-empty string")
    return check_name_length(value, name, where)


def parse_timer_op(raw: Any, index: int, where: str | None = None, *, in_transaction: bool = False) -> dict:
    """One operation, checked whole; the result is the command's op (messageId added at propose).
    `in_transaction`: a cancel may carry `requirePending`."""
    parsed = _parse_plain_schedule(raw)
    if parsed is not None:
        return parsed
    return _parse_timer_op_checked(raw, where or f"operations[{index}]", in_transaction)


def _parse_plain_schedule(raw: Any) -> dict | None:
    """The op `_parse_timer_op_checked` returns for a well-formed schedule of plain JSON values,
    or None for anything else (which that then refuses with its message, or accepts)."""
    rows = _plain_rows([raw], [None])
    if rows is None:
        return None
    queue, timer_key, partition, delay, txn, _, payload, payload_zstd, encrypted = rows[0]
    return {
        "op": raw["op"], "queue": queue, "timerKey": timer_key, "partition": partition, "delayMs": delay,
        "txn": txn, "payload": payload, "payloadZstd": payload_zstd, "encrypted": encrypted,
    }


# Key orders of a schedule seen to hold the required fields and only known ones: a client sends
# one, and a single-op call would otherwise build a set of its keys on every call. Bounded (a
# client cycling key orders only empties it): there are at most 9! orders of the 9 fields.
SCHEDULE_SHAPES_KEPT = 64
_SCHEDULE_SHAPES: set[tuple] = set()
_REQUIRED_VALUES = itemgetter("op", "queue", "timerKey", "delayMs", "txn", "payload")


def _plain_rows(raw_ops: list, message_ids: list) -> list[list] | None:
    """The command rows (ROW_FIELDS) of ops that are all well-formed schedules of plain JSON values,
    each with its messageId, or None when one is anything else (which `_parse_timer_op_checked`
    then refuses with its message, or accepts).

    One loop, one `and` chain an op, because the checked path's calls and messages cost more than
    the rest of the op in a 256-op call. The field names are checked once per distinct key order (a
    client sends one), and the required values are taken in one itemgetter call (figures in
    docs/performance.md)."""
    rows = []
    append = rows.append
    checked_shape = None
    for raw, message_id in zip(raw_ops, message_ids):
        if type(raw) is not dict:
            return None
        shape = tuple(raw)
        if shape != checked_shape:
            if shape not in _SCHEDULE_SHAPES:
                if not SCHEDULE_REQUIRED <= set(shape) <= SCHEDULE_FIELDS:
                    return None
                if len(_SCHEDULE_SHAPES) >= SCHEDULE_SHAPES_KEPT:
                    _SCHEDULE_SHAPES.clear()
                _SCHEDULE_SHAPES.add(shape)
            checked_shape = shape
        op, queue, timer_key, delay, txn, payload_text = _REQUIRED_VALUES(raw)
        if len(shape) == len(SCHEDULE_REQUIRED):  # no optional field: the defaults
            partition, payload_zstd, encrypted = DEFAULT_PARTITION, False, False
        else:
            partition = raw.get("partition", DEFAULT_PARTITION)
            payload_zstd = raw.get("payloadZstd", False)
            encrypted = raw.get("encrypted", False)
        if not (op in SCHEDULE_OPS and type(queue) is str and queue and type(timer_key) is str and timer_key
                and type(txn) is str and txn and type(delay) is int and 0 <= delay <= JSON_SAFE_INT
                and type(partition) is str and partition and type(payload_zstd) is bool and type(encrypted) is bool
                and type(payload_text) is str and len(queue) <= NAME_CHARS_ALWAYS_WITHIN
                and len(timer_key) <= NAME_CHARS_ALWAYS_WITHIN and len(txn) <= NAME_CHARS_ALWAYS_WITHIN
                and len(partition) <= NAME_CHARS_ALWAYS_WITHIN):
            return None
        try:
            payload = binascii.a2b_base64(payload_text, strict_mode=True)  # codec.decode_base64 of a str, inlined
        except ValueError:
            return None
        append([queue, timer_key, partition, delay, txn, message_id, payload, payload_zstd, encrypted])
    return rows


def _parse_timer_op_checked(raw: Any, where: str, in_transaction: bool = False) -> dict:
    """Every check in the order of docs/spec.md section 2, each failure a 400 naming the field."""
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object")
    op = raw.get("op")
    keys = raw.keys()
    # A well-formed schedule names every required field and nothing else: two subset tests say so
    # and the field-name checks cannot fail. Anything else takes them in order, for their message.
    if not (op in SCHEDULE_OPS and SCHEDULE_REQUIRED <= keys and keys <= SCHEDULE_FIELDS):
        _check_field_names(raw, op, where)
    queue = _non_empty_string(raw, "queue", where)
    timer_key = _non_empty_string(raw, "timerKey", where)
    if op == "cancel":
        txn = raw.get("txn")
        if txn is not None and not isinstance(txn, str):
            raise bad_request(f"{where}: txn must be a string")
        if txn is not None:
            check_name_length(txn, "txn", where)
        cancel = {"op": "cancel", "queue": queue, "timerKey": timer_key, "txn": txn}
        if _require_pending(raw, where, in_transaction):
            cancel[REQUIRE_PENDING] = True  # only when set: a plain cancel's entry keeps its shape
        return cancel
    delay = raw["delayMs"]
    if not is_int(delay):
        raise bad_request(f"{where}: delayMs must be an integer number of milliseconds, got {delay!r}")
    if delay < 0:
        raise bad_request(f"{where}: delayMs {delay} is negative; send 0 (or more) milliseconds")
    txn = _non_empty_string(raw, "txn", where)
    try:
        payload = decode_base64(raw["payload"])
    except PayloadDecodeError as exc:
        raise bad_request(f"{where}: payload {exc}") from None
    partition = raw.get("partition", DEFAULT_PARTITION)
    if not isinstance(partition, str) or partition == "":
        raise bad_request(f"{where}: partition must be a non-empty string")
    check_name_length(partition, "partition", where)
    payload_zstd = raw.get("payloadZstd", False)
    if not isinstance(payload_zstd, bool):
        raise bad_request(f"{where}: payloadZstd must be true or false")
    encrypted = raw.get("encrypted", False)
    if not isinstance(encrypted, bool):
        raise bad_request(f"{where}: encrypted must be true or false")
    return {
        "op": op, "queue": queue, "timerKey": timer_key, "partition": partition, "delayMs": delay,
        "txn": txn, "payload": payload, "payloadZstd": payload_zstd, "encrypted": encrypted,
    }


def _require_pending(raw: dict, where: str, in_transaction: bool) -> bool:
    if REQUIRE_PENDING not in raw:
        return False
    if not in_transaction:
        raise bad_request(f"{where}: requirePending applies to a cancel inside POST /api/v1/transaction only "
                          "(a standalone cancel answers 'absent' when the timer is not pending)")
    value = raw[REQUIRE_PENDING]
    if not isinstance(value, bool):
        raise bad_request(f"{where}: requirePending must be true or false")
    return value


def _check_field_names(raw: dict, op: Any, where: str) -> None:
    """The field-name checks in their order: server-owned, op, unknown, missing."""
    owned = sorted(k for k in raw if k in SERVER_OWNED_FIELDS or k.startswith("_"))
    if owned:
        raise bad_request(f"{where}: {', '.join(owned)} is set by the server and may not be sent")
    if op is None:
        raise bad_request(f"{where}: op is missing")
    if op not in OPS:
        raise bad_request(f"{where}: op {op!r} is not one of {', '.join(OPS)}")
    required, optional = (CANCEL_REQUIRED, CANCEL_OPTIONAL) if op == "cancel" else (SCHEDULE_REQUIRED, SCHEDULE_OPTIONAL)
    unknown = sorted(raw.keys() - required - optional)
    if unknown:
        raise bad_request(f"{where}: unknown field(s) for {op}: {', '.join(unknown)}")
    missing = sorted(required - raw.keys())
    if missing:
        raise bad_request(f"{where}: {op} needs {', '.join(missing)}")


def operations_of(body: Any, max_ops: int) -> list:
    """The body's list of operations, or a 400 for the body's own shape (before any op's)."""
    if isinstance(body, dict):
        extra = sorted(body.keys() - {"operations"})
        if extra:
            raise bad_request(f"unknown top-level field(s): {', '.join(extra)}; send {{\"operations\": [...]}}")
        if "operations" not in body:
            raise bad_request("operations is missing")
        raw_ops = body["operations"]
    else:
        raw_ops = body
    if not isinstance(raw_ops, list):
        raise bad_request("operations must be an array")
    if not raw_ops:
        raise bad_request("operations is empty")
    if len(raw_ops) > max_ops:
        raise bad_request(f"{len(raw_ops)} operations is over the cap of {max_ops} per call (QUEEN_TIMERS_MAX_OPS_PER_CALL)")
    return raw_ops


def parse_timer_ops(body: Any, max_ops: int) -> list[dict]:
    """The whole batch, or a 400: nothing is proposed from a body with one bad op."""
    return checked_timer_ops(operations_of(body, max_ops))


def checked_timer_ops(raw_ops: list) -> list[dict]:
    """Every op parsed, then no (queue, timerKey) twice: the first refusal in that order."""
    ops = [parse_timer_op(raw, i) for i, raw in enumerate(raw_ops)]
    refuse_duplicate_identities([(op["queue"], op["timerKey"]) for op in ops])
    return ops


def refuse_duplicate_identities(identities: list[tuple[str, str]]) -> None:
    """A 400 naming the first op whose (queue, timerKey) an earlier op of the call has."""
    if len(set(identities)) == len(identities):
        return
    seen: set[tuple[str, str]] = set()
    for i, identity in enumerate(identities):
        if identity in seen:
            raise bad_request(f"operations[{i}]: queue {identity[0]!r} timerKey {identity[1]!r} appears twice in one call")
        seen.add(identity)


class PlainSchedules(NamedTuple):
    """A call of plain schedules only (the batched client's call), parsed straight into the rows
    of the command's schedule_rows group (docs/commands.md): one pass over the ops instead of a
    map per op, a copy with its messageId, and the checks' own passes."""

    raw_ops: list[dict]  # the request's ops, as sent (their `op` is what the metrics count)
    rows: list[list]  # [queue, timerKey, partition, delayMs, txn, messageId, payload, payloadZstd, encrypted]
    queues: set[str]

    def as_ops(self) -> list[dict]:
        """The ops `checked_timer_ops` returns for the same call (no messageId: minted at propose)."""
        return [{"op": raw["op"], "queue": queue, "timerKey": key, "partition": partition, "delayMs": delay,
                 "txn": txn, "payload": payload, "payloadZstd": payload_zstd, "encrypted": encrypted}
                for raw, (queue, key, partition, delay, txn, _, payload, payload_zstd, encrypted)
                in zip(self.raw_ops, self.rows)]


def plain_schedules(raw_ops: list) -> PlainSchedules | None:
    """The call as PlainSchedules when every op is a schedule `_parse_plain_schedule` takes, a 400
    when two name the same (queue, timerKey) (the first refusal `checked_timer_ops` would give:
    every op parses), else None: `checked_timer_ops` then answers or refuses it as it always did.

    The messageIds are minted here for all the ops at once; a call that turns out not to be plain
    discards them."""
    rows = _plain_rows(raw_ops, new_message_ids(len(raw_ops)))
    if rows is None:
        return None
    if len(rows) == 1:  # a single-op call: no identity twice, one queue
        return PlainSchedules(raw_ops, rows, {rows[0][ROW_QUEUE]})
    refuse_duplicate_identities(list(zip(map(itemgetter(ROW_QUEUE), rows), map(itemgetter(ROW_TIMER_KEY), rows))))
    return PlainSchedules(raw_ops, rows, set(map(itemgetter(ROW_QUEUE), rows)))
