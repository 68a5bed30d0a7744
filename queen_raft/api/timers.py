"""The four timer routes of SPEC.md section 2: shape, gates in SPEC order, the command, the answer."""

from __future__ import annotations

import binascii
from operator import itemgetter
from typing import Any, NamedTuple
from urllib.parse import quote

import zstandard
from aiohttp import web

from queen_raft.api.auth import Access, Principal, require
from queen_raft.api.codec import PayloadDecodeError, decode_base64, encode_base64
from queen_raft.api.encryption import encryption_unavailable
from queen_raft.api.errors import PAUSED, ApiError, retry_after_header
from queen_raft.api.group_calls import propose, read
from queen_raft.api.ids import new_message_ids
from queen_raft.api.requests import JSON_SAFE_INT, is_int, json_body, json_response, query_int
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.config import Settings
from queen_raft.raft.group_api import GroupApi

BAD_REQUEST = "timers_bad_request"
UNAVAILABLE = "timers_unavailable"
DEFAULT_PARTITION = "Default"

OPS = ("schedule", "reschedule", "cancel")
# Fields a client may never set: they are attested by the broker (producerSub above all) or
# computed by it. Supplying one is a 400, never a silent drop (seeds/timer-routes.md).
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
CANCEL_OPTIONAL = frozenset({"txn"})

# A path catch-all: like .* but across newlines too, since a timerKey (or KV key) the POST body
# accepts may hold any character, and the GET and DELETE routes must reach it (the fuzz found one
# with a newline answered 404).
CATCH_ALL = r"[\s\S]*"
# List: limit defaults to 100, clamped (not refused) to 1..1000 (SPEC.md section 2).
LIST_DEFAULT_LIMIT = 100
LIST_MAX_LIMIT = 1000
# A paused tenant is an operator's decision; ask clients to come back in a while, not hammer.
TIMERS_DISABLED_RETRY_AFTER_S = 30


def bad_request(message: str) -> ApiError:
    return ApiError(400, BAD_REQUEST, message)


def _non_empty_string(op: dict, name: str, where: str) -> str:
    value = op.get(name)
    if not isinstance(value, str) or value == "":
        raise bad_request(f"{where}: {name} must be a non-empty string")
    return value


def parse_timer_op(raw: Any, index: int, where: str | None = None) -> dict:
    """One operation, checked whole; the result is the command's op (messageId added at propose)."""
    parsed = _parse_plain_schedule(raw)
    if parsed is not None:
        return parsed
    return _parse_timer_op_checked(raw, where or f"operations[{index}]")


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


_REQUIRED_VALUES = itemgetter("op", "queue", "timerKey", "delayMs", "txn", "payload")


def _plain_rows(raw_ops: list, message_ids: list) -> list[list] | None:
    """The command rows (ROW_FIELDS) of ops that are all well-formed schedules of plain JSON values,
    each with its messageId, or None when one is anything else (which `_parse_timer_op_checked`
    then refuses with its message, or accepts).

    One loop, one `and` chain an op: 2 us an op of a 256-op call went to the checked path's calls
    and messages. The field names are checked once per distinct key order (a client sends one),
    the required values taken in one itemgetter call: 1.4 us an op with the messageId, from 1.8
    for a call per op (/tmp micro-benchmark, min of 7)."""
    rows = []
    append = rows.append
    checked_shape = None
    for raw, message_id in zip(raw_ops, message_ids):
        if type(raw) is not dict:
            return None
        shape = tuple(raw)
        if shape != checked_shape:
            if not SCHEDULE_REQUIRED <= set(shape) <= SCHEDULE_FIELDS:
                return None
            checked_shape = shape
        op, queue, timer_key, delay, txn, payload_text = _REQUIRED_VALUES(raw)
        if len(shape) == len(SCHEDULE_REQUIRED):  # no optional field: the defaults
            partition, payload_zstd, encrypted = DEFAULT_PARTITION, False, False
        else:
            partition = raw.get("partition", DEFAULT_PARTITION)
            payload_zstd = raw.get("payloadZstd", False)
            encrypted = raw.get("encrypted", False)
        if not (op in SCHEDULE_OPS and type(queue) is str and queue and type(timer_key) is str and timer_key
                and type(txn) is str and txn and type(delay) is int and -JSON_SAFE_INT <= delay <= JSON_SAFE_INT
                and type(partition) is str and partition and type(payload_zstd) is bool and type(encrypted) is bool
                and type(payload_text) is str):
            return None
        try:
            payload = binascii.a2b_base64(payload_text, strict_mode=True)  # codec.decode_base64 of a str, inlined
        except ValueError:
            return None
        append([queue, timer_key, partition, delay, txn, message_id, payload, payload_zstd, encrypted])
    return rows


def _parse_timer_op_checked(raw: Any, where: str) -> dict:
    """Every check in SPEC order, each failure a 400 naming the field."""
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
        return {"op": "cancel", "queue": queue, "timerKey": timer_key, "txn": txn}
    delay = raw["delayMs"]
    if not is_int(delay):
        raise bad_request(f"{where}: delayMs must be an integer number of milliseconds, got {delay!r}")
    txn = _non_empty_string(raw, "txn", where)
    try:
        payload = decode_base64(raw["payload"])
    except PayloadDecodeError as exc:
        raise bad_request(f"{where}: payload {exc}") from None
    partition = raw.get("partition", DEFAULT_PARTITION)
    if not isinstance(partition, str) or partition == "":
        raise bad_request(f"{where}: partition must be a non-empty string")
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
    refuse_duplicate_identities(list(zip(map(itemgetter(ROW_QUEUE), rows), map(itemgetter(ROW_TIMER_KEY), rows))))
    return PlainSchedules(raw_ops, rows, set(map(itemgetter(ROW_QUEUE), rows)))


def check_plan_limits(ops: list[dict], settings: Settings) -> None:
    """The horizon (403) and the payload ceiling (413), after the pause and rate gates."""
    horizon_ms = settings.timers_max_horizon_s * 1000
    for i, op in enumerate(ops):
        if op["op"] != "cancel" and op["delayMs"] > horizon_ms:
            raise ApiError(403, "timer_horizon_exceeded",
                           f"operations[{i}]: delayMs {op['delayMs']} is beyond the horizon of {settings.timers_max_horizon_s} s")
    for i, op in enumerate(ops):
        if op["op"] != "cancel" and len(op["payload"]) > settings.timers_max_payload_bytes:
            raise ApiError(413, "payload_too_large",
                           f"operations[{i}]: the decoded payload is {len(op['payload'])} bytes, over {settings.timers_max_payload_bytes}")


def cancel_hint(ops: list[dict]) -> dict[str, str]:
    """Names the route that always works, for a batch holding a cancel refused by pause, rate or quota."""
    for op in ops:
        if op["op"] == "cancel":
            path = f"/api/v1/timers/{quote(op['queue'], safe='')}/{quote(op['timerKey'], safe='/')}"
            return {"x-queen-timers-hint": f"DELETE {path}"}
    return {}


def read_schedule_gates(group: GroupApi, ops: list[dict]) -> tuple[dict[str, dict | None], bool]:
    """(the destination queues' options, whether an operator paused scheduling), in one look at
    the local replica: one take of the lock the tick thread holds while it applies, not two.

    Read locally: both are replicated state, and a configure or pause racing this call by one
    apply is no different from one that landed a moment later."""
    return _read_gates(group, {op["queue"] for op in ops if op["op"] != "cancel"})


def encrypting_queues(serving: ServingNode, group: GroupApi, ops: list[dict],
                      options: dict[str, dict | None] | None = None) -> set[str]:
    """The destination queues that encrypt at rest; a client `encrypted: true` for one is a 400.
    `options` are the queues' options when the caller has read them already (read_schedule_gates)."""
    if options is None:
        options = read_schedule_gates(group, ops)[0]
    encrypting = {q for q, o in options.items() if o and o.get("encryptionEnabled")}
    for i, op in enumerate(ops):
        if op["op"] != "cancel" and op["queue"] in encrypting and op["encrypted"]:
            raise bad_request(f"operations[{i}]: queue {op['queue']!r} encrypts at rest: the broker encrypts, send plaintext")
    if encrypting and serving.cipher is None:
        raise encryption_unavailable(encrypting)
    return encrypting


def encrypt_op(serving: ServingNode, op: dict) -> dict:
    """Encrypted at schedule, by the proposing node (SPEC.md). A zstd payload is decompressed first:
    the fire cannot decompress ciphertext."""
    payload = op["payload"]
    if op["payloadZstd"]:
        payload = decompress_bounded(payload, serving.settings.timers_max_payload_bytes)
    return dict(op, payload=serving.cipher.encrypt(payload), payloadZstd=False, encrypted=True)


def decompress_bounded(data: bytes, limit: int) -> bytes:
    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            out = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise bad_request(f"payloadZstd: the payload does not decompress ({exc})") from None
    if len(out) > limit:
        raise ApiError(413, "payload_too_large", f"the decompressed payload is over {limit} bytes")
    return out


async def post_timers(request: web.Request) -> web.Response:
    serving = serving_of(request)
    try:
        principal = require(serving.config, request, Access.PRODUCE)
        return await _schedule_batch(request, serving, principal)
    except ApiError as error:  # every refusal is counted by its code, auth's included (issue 4)
        serving.metrics.count_schedule_rejected(error.code)
        raise


async def _schedule_batch(request: web.Request, serving: ServingNode, principal: Principal) -> web.Response:
    """The gates of SPEC.md section 2 in order: shape, pause, rate, horizon, payload; then the
    entry, whose answer may be the quota's refusal."""
    settings = serving.settings
    raw_ops = operations_of(await json_body(request, BAD_REQUEST), settings.timers_max_ops_per_call)
    group = serving.groups[principal.tenant]
    plain = plain_schedules(raw_ops)
    if plain is None:
        ops = checked_timer_ops(raw_ops)
        options, paused = read_schedule_gates(group, ops)
    else:
        options, paused = _read_gates(group, plain.queues)
        if not any(o and o.get("encryptionEnabled") for o in options.values()):
            return await _schedule_plain(serving, principal, plain, paused)
        ops = plain.as_ops()  # the broker encrypts some of them: the general path does
    tenant = principal.tenant
    hint = cancel_hint(ops)
    encrypting = encrypting_queues(serving, group, ops, options)
    _check_pause_and_rate(serving, tenant, paused, hint)
    check_plan_limits(ops, settings)
    if encrypting:
        ops = [encrypt_op(serving, op) if op["queue"] in encrypting and op["op"] != "cancel" else op for op in ops]
    command_ops = with_message_ids(ops)
    results = await _propose_timers(serving, principal, command_ops, hint)
    serving.metrics.count_timer_ops(tenant, ops, results)
    return json_response({"results": results})


async def _schedule_plain(serving: ServingNode, principal: Principal, plain: PlainSchedules,
                          paused: bool) -> web.Response:
    """`_schedule_batch` for plain schedules to queues that do not encrypt: the same gates in
    the same order, with the same refusals, on the rows; the command holds them as one
    schedule_rows group."""
    settings = serving.settings
    _check_pause_and_rate(serving, principal.tenant, paused, {})  # no cancel: no hint
    rows = plain.rows
    horizon_ms = settings.timers_max_horizon_s * 1000
    max_payload = settings.timers_max_payload_bytes
    if max(map(itemgetter(ROW_DELAY_MS), rows)) > horizon_ms or \
            max(map(len, map(itemgetter(ROW_PAYLOAD), rows))) > max_payload:
        check_plan_limits(plain.as_ops(), settings)  # raises, with the first op to blame
    results = await _propose_timers(serving, principal, [{"op": SCHEDULE_ROWS, "rows": rows}], {})
    serving.metrics.count_timer_ops(principal.tenant, plain.raw_ops, results)
    return json_response({"results": results})


def _read_gates(group: GroupApi, queues: set[str]) -> tuple[dict[str, dict | None], bool]:
    """`read_schedule_gates` of a call scheduling to `queues`."""
    return group.peek_local(lambda state: ({q: state.queue_options(q) for q in queues}, state.scheduling_paused))


def _check_pause_and_rate(serving: ServingNode, tenant: str, paused: bool, hint: dict[str, str]) -> None:
    """The pause (503) and then the tenant's call rate on this node (429)."""
    if paused:
        raise ApiError(503, "timers_disabled", "an operator paused timer scheduling for this tenant",
                       {**retry_after_header(TIMERS_DISABLED_RETRY_AFTER_S), **hint}, fields={"reason": PAUSED})
    wait_s = serving.timer_rate.take(tenant)
    if wait_s > 0:
        raise ApiError(429, "rate_limited", f"over the tenant's timer call rate of {serving.settings.timers_rate}/s on this node",
                       {**retry_after_header(wait_s), **hint})


async def _propose_timers(serving: ServingNode, principal: Principal, command_ops: list[dict],
                          hint: dict[str, str]) -> list[dict]:
    """The `timers` entry of the call, and its results; the state's refusal as its answer."""
    settings = serving.settings
    command = {
        "op": "timers", "producerSub": principal.sub, "maxPending": settings.timers_max_pending,
        "policy": settings.fire_policy(), "ops": command_ops,
    }
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        code = result["error"]
        if code == "timers_quota_exceeded":
            raise ApiError(403, code, result.get("message") or "the tenant's pending-timer quota is exhausted", hint)
        if code == "timers_disabled":  # paused by an entry this node had not applied at the gate
            raise ApiError(503, code, result.get("message") or "an operator paused timer scheduling for this tenant",
                           {**retry_after_header(TIMERS_DISABLED_RETRY_AFTER_S), **hint}, fields={"reason": PAUSED})
        if code == BAD_REQUEST:
            raise ApiError(400, code, result.get("message") or "the batch was refused")
        raise ApiError(500, code, result.get("message") or "the state refused the batch")
    return result["results"]


def with_message_ids(ops: list[dict]) -> list[dict]:
    """The command's ops: each schedule gets the messageId its fire will carry, minted here by the
    proposer (one clock read and one os.urandom for the batch); cancels go as they are."""
    ids = iter(new_message_ids(sum(1 for op in ops if op["op"] != "cancel")))
    return [dict(op, messageId=next(ids)) if op["op"] != "cancel" else op for op in ops]


def _path_identity(request: web.Request) -> tuple[str, str]:
    queue = request.match_info["queue"]
    timer_key = request.match_info.get("timerKey", "")
    if timer_key == "":
        raise bad_request("the path needs a timerKey after the queue")
    return queue, timer_key


async def delete_timer(request: web.Request) -> web.Response:
    """Cancel on its own route: passes the pause, the rate and the quota (seeds/timer-routes.md)."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    queue, timer_key = _path_identity(request)
    txn = request.query.get("txn")
    command = {
        "op": "timers", "producerSub": principal.sub, "maxPending": None,
        "ops": [{"op": "cancel", "queue": queue, "timerKey": timer_key, "txn": txn}],
    }
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        raise ApiError(500, result["error"], result.get("message") or "the state refused the cancel")
    answer = result["results"][0]
    serving.metrics.count_timer_ops(principal.tenant, command["ops"], result["results"])
    return json_response(answer)


# The peek answer of SPEC.md section 2, in this order; anything else the state keeps stays inside.
# dueAt (the next try, later than deliverAt while a failing timer backs off) is the state's addition.
PEEK_FIELDS = ("partition", "deliverAt", "dueAt", "txn", "messageId", "payload", "payloadZstd", "encrypted",
               "producerSub", "attempts", "lastError", "claimed", "createdAt", "updatedAt")
LIST_ROW_FIELDS = tuple(name for name in PEEK_FIELDS if name != "payload")


def _timer_fields(row: dict, names: tuple[str, ...]) -> dict:
    out = {name: row.get(name) for name in names}
    if "payload" in out and isinstance(out["payload"], (bytes, bytearray)):
        out["payload"] = encode_base64(bytes(out["payload"]))
    if "claimed" in out:
        out["claimed"] = False  # nothing holds a claim in the Raft design: fire and cancel are ordered entries
    return out


def peek_answer(queue: str, timer_key: str, row: dict | None) -> dict:
    if row is None:
        return {"found": False, "queue": queue, "timerKey": timer_key}
    return {"found": True, "queue": queue, "timerKey": timer_key, **_timer_fields(row, PEEK_FIELDS)}


def list_answer(page: dict) -> dict:
    rows = [{"queue": row.get("queue"), "timerKey": row.get("timerKey"), **_timer_fields(row, LIST_ROW_FIELDS)}
            for row in page.get("rows", [])]
    return {"rows": rows, "truncated": bool(page.get("truncated")), "nextAfter": page.get("nextAfter")}


async def get_timer(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    queue, timer_key = _path_identity(request)
    row = await read(serving, principal.tenant, lambda state: state.peek_timer(queue, timer_key), UNAVAILABLE)
    return json_response(peek_answer(queue, timer_key, row))


async def list_timers(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    queue = request.match_info["queue"]
    after = request.query.get("after") or None
    limit = min(LIST_MAX_LIMIT, max(1, query_int(request, "limit", LIST_DEFAULT_LIMIT, BAD_REQUEST)))
    page = await read(serving, principal.tenant, lambda state: state.list_timers(queue, after, limit), UNAVAILABLE)
    return json_response(list_answer(page))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/timers", post_timers)
    app.router.add_get("/api/v1/timers/{queue}", list_timers)
    app.router.add_get(f"/api/v1/timers/{{queue}}/{{timerKey:{CATCH_ALL}}}", get_timer)
    app.router.add_delete(f"/api/v1/timers/{{queue}}/{{timerKey:{CATCH_ALL}}}", delete_timer)
