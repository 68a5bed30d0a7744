"""The four timer routes of docs/spec.md section 2: gates in its order, the command, the answer; the
body's shape is parsed in timer_parsing.py."""

from __future__ import annotations

from operator import itemgetter
from urllib.parse import quote

from aiohttp import web

from queen_raft.api.auth import Access, Principal, authorize, require
from queen_raft.api.codec import encode_base64
from queen_raft.api.encryption import encryption_unavailable
from queen_raft.api.errors import PAUSED, ApiError, retry_after_header
from queen_raft.api.group_calls import propose, read
from queen_raft.api.ids import new_message_ids
from queen_raft.api import wire_json
from queen_raft.api.requests import body_bytes, json_response, parse_json, query_int
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.api.timer_parsing import (
    BAD_REQUEST, ROW_DELAY_MS, ROW_PAYLOAD, SCHEDULE_ROWS, PlainSchedules, bad_request, check_name_length,
    checked_timer_ops, operations_of, plain_schedules,
)
from queen_raft.config import Settings
from queen_raft.raft.group_api import GroupApi
from queen_raft.state.timer_ops import CHECK_PAYLOAD_BOUND, PAYLOAD_TOO_LARGE
from queen_raft.state.zstd_bounded import decompress_bounded

UNAVAILABLE = "timers_unavailable"

# A path catch-all: like .* but across newlines too, since a timerKey (or KV key) the POST body
# accepts may hold any character, and the GET and DELETE routes must reach it (the fuzz found one
# with a newline answered 404).
CATCH_ALL = r"[\s\S]*"
# List: limit defaults to 100, clamped (not refused) to 1..1000 (docs/spec.md section 2).
LIST_DEFAULT_LIMIT = 100
LIST_MAX_LIMIT = 1000
# A paused tenant is an operator's decision; ask clients to come back in a while, not hammer.
TIMERS_DISABLED_RETRY_AFTER_S = 30


def refuse_cancels_without_access(principal: Principal, raw_ops: list) -> None:
    """403 when the batch holds a cancel and the token may not cancel (write-only), as DELETE and a
    transaction's cancel are: a cancel reads and changes another producer's timer. Checked on the
    ops as sent, before their shape, since the gates put 403 before 400."""
    if any(type(raw) is dict and raw.get("op") == "cancel" for raw in raw_ops):
        authorize(principal, Access.CONSUME)


def check_plan_limits(ops: list[dict], settings: Settings) -> None:
    """The horizon (403) and the payload ceiling (413), after the pause and rate gates."""
    horizon_ms = settings.timers_max_horizon_s * 1000
    for i, op in enumerate(ops):
        if op["op"] != "cancel" and op["delayMs"] > horizon_ms:
            raise ApiError(403, "timer_horizon_exceeded",
                           f"operations[{i}]: delayMs {op['delayMs']} is beyond the horizon of {horizon_ms} ms "
                           f"({settings.timers_max_horizon_s} s, QUEEN_TIMERS_MAX_HORIZON_S)")
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
    """Encrypted at schedule, by the proposing node (docs/spec.md section 2). A zstd payload is decompressed first:
    the fire cannot decompress ciphertext."""
    payload = op["payload"]
    if op["payloadZstd"]:
        payload = decompressed_or_refused(payload, serving.settings.timers_max_payload_bytes)
    return dict(op, payload=serving.cipher.encrypt(payload), payloadZstd=False, encrypted=True)


def decompressed_or_refused(data: bytes, limit: int) -> bytes:
    """The state machine's own bounded decompression (what the fire would do), its refusals as answers."""
    decoded = decompress_bounded(data, limit)
    if decoded == "payload_too_large":
        raise ApiError(413, "payload_too_large", f"the decompressed payload is over {limit} bytes")
    if isinstance(decoded, str):
        raise bad_request("payloadZstd: the payload does not decompress")
    return decoded


async def post_timers(request: web.Request) -> web.Response:
    serving = serving_of(request)
    try:
        principal = require(serving.config, request, Access.PRODUCE)
        return await _schedule_batch(request, serving, principal)
    except ApiError as error:  # every refusal is counted by its code, auth's included
        serving.metrics.count_schedule_rejected(error.code)
        raise


async def _schedule_batch(request: web.Request, serving: ServingNode, principal: Principal) -> web.Response:
    """The gates of docs/spec.md section 2 in order: shape, pause, rate, horizon, payload; then the
    entry, whose answer may be the quota's refusal."""
    settings = serving.settings
    raw_ops, plain = _operations(await body_bytes(request, BAD_REQUEST), settings.timers_max_ops_per_call)
    group = serving.groups[principal.tenant]
    if plain is None:
        refuse_cancels_without_access(principal, raw_ops)
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


def _operations(raw: bytes, max_ops: int) -> tuple[list, PlainSchedules | None]:
    """The body's operations and, when they are all plain schedules, their PlainSchedules.

    Read by orjson without the scan for integers past 64 bits first: a plain schedule takes no
    float, so a body those would change (read as floats) is not plain, and only then is it read
    again exactly. The body's own shape (operations_of) does not depend on its numbers' values."""
    body = wire_json.loads_without_integer_scan(raw)
    if body is wire_json.NOT_READ:
        raw_ops = operations_of(parse_json(raw, BAD_REQUEST), max_ops)
        return raw_ops, plain_schedules(raw_ops)
    raw_ops = operations_of(body, max_ops)
    plain = plain_schedules(raw_ops)
    if plain is None and wire_json.may_hold_wide_integer(raw):
        raw_ops = operations_of(parse_json(raw, BAD_REQUEST), max_ops)
    return raw_ops, plain


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
        "op": "timers", "producerSub": principal.sub, "maxPending": serving.config.timers_max_pending(principal.tenant),
        "policy": settings.fire_policy(), "ops": command_ops, CHECK_PAYLOAD_BOUND: True,
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
        if code == PAYLOAD_TOO_LARGE:  # over the destination queue's maxPayloadBytes
            index = result.get("index")
            where = "" if index is None else f"operations[{index}]: "
            raise ApiError(413, code, where + (result.get("message") or "the payload is over the queue's maxPayloadBytes"))
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
    return check_name_length(queue, "queue", "the path"), check_name_length(timer_key, "timerKey", "the path")


async def delete_timer(request: web.Request) -> web.Response:
    """Cancel on its own route: passes the pause, the rate and the quota (docs/spec.md section 2)."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    queue, timer_key = _path_identity(request)
    txn = request.query.get("txn")
    if txn is not None:
        check_name_length(txn, "txn", "the query")
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


# The peek answer of docs/spec.md section 2, in this order; anything else the state keeps stays inside.
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


def peek_answer(queue: str, timer_key: str, row: dict | None, fired: dict | None = None) -> dict:
    """`status` pending (found), else fired or dead_lettered while the state remembers the key's
    fire (where its message went, fired_memory.py), else absent."""
    if row is not None:
        return {"found": True, "status": "pending", "queue": queue, "timerKey": timer_key,
                **_timer_fields(row, PEEK_FIELDS)}
    if fired is not None:
        return {"found": False, "queue": queue, "timerKey": timer_key, **fired}
    return {"found": False, "status": "absent", "queue": queue, "timerKey": timer_key}


def list_answer(page: dict) -> dict:
    rows = [{"queue": row.get("queue"), "timerKey": row.get("timerKey"), **_timer_fields(row, LIST_ROW_FIELDS)}
            for row in page.get("rows", [])]
    return {"rows": rows, "truncated": bool(page.get("truncated")), "nextAfter": page.get("nextAfter")}


async def get_timer(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    queue, timer_key = _path_identity(request)
    row, fired = await read(serving, principal.tenant,
                            lambda state: (state.peek_timer(queue, timer_key), state.fired_timer(queue, timer_key)),
                            UNAVAILABLE)
    return json_response(peek_answer(queue, timer_key, row, fired))


async def list_timers(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    queue = request.match_info["queue"]
    after = request.query.get("after") or None
    prefix = request.query.get("prefix") or None  # only the keys that start with it; "" is all
    limit = min(LIST_MAX_LIMIT, max(1, query_int(request, "limit", LIST_DEFAULT_LIMIT, BAD_REQUEST)))
    page = await read(serving, principal.tenant, lambda state: state.list_timers(queue, after, limit, prefix),
                      UNAVAILABLE)
    return json_response(list_answer(page))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/timers", post_timers)
    app.router.add_get("/api/v1/timers/{queue}", list_timers)
    app.router.add_get(f"/api/v1/timers/{{queue}}/{{timerKey:{CATCH_ALL}}}", get_timer)
    app.router.add_delete(f"/api/v1/timers/{{queue}}/{{timerKey:{CATCH_ALL}}}", delete_timer)
