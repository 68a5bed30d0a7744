"""KV routes (docs/spec.md section 3): one key by path, and batches that are all or nothing.

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- `GET /api/v1/kv/{ns}/{key}` of an absent (never written, deleted or expired) key answers 200 with
  `found: false`, like a timer peek: absence is an answer, not an error.
- A write takes `ttlSeconds` (a positive integer) or `forever: true` (no expiry; the default when
  neither is given, and it clears an earlier expiry on `put`). Giving both is a 400.
- A batch holding only `get` and `check` is a read and is open to read-only tokens; any write in it
  needs read-write or admin. write-only tokens may neither read nor write KV (docs/spec.md section 7
  gives them push and schedule only).
- A failed precondition (`check`, or `putIfAbsent` on a live key) refuses the whole batch with 409
  `kv_precondition` and the failed op's `index`; `incr` of a value that is not an integer is a 400
  `bad_request` with its `index`. Either way nothing changed.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.errors import ApiError
from queen_raft.api.group_calls import propose, read
from queen_raft.api.requests import JSON_SAFE_INT, is_int, json_body, json_response
from queen_raft.api.serving import serving_of
from queen_raft.api.timers import CATCH_ALL
from queen_raft.state.limits import MAX_ANSWER_BYTES, MAX_NAME_BYTES
from queen_raft.state.values import kv_value_problem

BAD_REQUEST = "bad_request"
UNAVAILABLE = "unavailable"
KV_PRECONDITION = "kv_precondition"
ANSWER_TOO_LARGE = "answer_too_large"

KV_OPS = ("get", "put", "putIfAbsent", "delete", "incr", "check")
READ_OPS = frozenset({"get", "check"})
VALUE_OPS = frozenset({"put", "putIfAbsent"})
EXPIRY_OPS = frozenset({"put", "putIfAbsent", "incr"})
# One call is one Raft entry: bound the ops so the entry stays small and its apply short.
MAX_KV_OPS = 1000
# A TTL this long is "forever" in practice; the bound keeps expiresAt (ms on the group clock) an
# integer that a JSON client reads exactly (below 2^53).
MAX_KV_TTL_S = 100 * 365 * 24 * 3600
# incr's step is bounded like any wire integer: a JSON client cannot send more exactly.
MAX_KV_INCR_STEP = JSON_SAFE_INT

OP_FIELDS: dict[str, frozenset[str]] = {
    "get": frozenset({"op", "ns", "key"}),
    "check": frozenset({"op", "ns", "key", "expectedVersion"}),
    "delete": frozenset({"op", "ns", "key"}),
    "put": frozenset({"op", "ns", "key", "value", "ttlSeconds", "forever"}),
    "putIfAbsent": frozenset({"op", "ns", "key", "value", "ttlSeconds", "forever"}),
    "incr": frozenset({"op", "ns", "key", "by", "ttlSeconds", "forever"}),
}


def bad_request(message: str, index: int | None = None) -> ApiError:
    return ApiError(400, BAD_REQUEST, message, fields={"index": index})


def check_wire_value(value: Any, where: str, index: int | None = None) -> None:
    """A stored value travels in msgpack: an integer past 2^53 is one no JSON client can mean
    exactly, and past 2^64 it would fail the entry's encoding (a 500 after the checks). It must also
    round-trip through a snapshot and an answer: its depth and stored size are bounded
    (state/limits.py), and the state refuses the same values."""
    problem = kv_value_problem(value)
    if problem is not None:
        raise bad_request(f"{where}: {problem}", index)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            continue
        if isinstance(item, int):
            if not is_int(item):
                raise bad_request(f"{where}: value holds an integer past 2^53", index)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def _name(raw: dict, field: str, where: str, index: int | None) -> str:
    value = raw.get(field)
    if not isinstance(value, str) or value == "":
        raise bad_request(f"{where}: {field} must be a non-empty string", index)
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise bad_request(f"{where}: {field} is over {MAX_NAME_BYTES} bytes", index)
    return value


def ttl_of(raw: dict, where: str, index: int | None) -> int | None:
    """`ttlSeconds` or `forever`: None means no expiry."""
    forever = raw.get("forever", False)
    if not isinstance(forever, bool):
        raise bad_request(f"{where}: forever must be true or false", index)
    ttl = raw.get("ttlSeconds")
    if ttl is None:
        return None
    if forever:
        raise bad_request(f"{where}: give ttlSeconds or forever, not both", index)
    if not is_int(ttl) or not 1 <= ttl <= MAX_KV_TTL_S:
        raise bad_request(f"{where}: ttlSeconds must be an integer 1..{MAX_KV_TTL_S}", index)
    return ttl


def parse_kv_op(raw: Any, where: str, index: int | None = None, extra_fields: frozenset[str] = frozenset()) -> dict:
    """One op as the state's kv command takes it; `index` is the op's place in the caller's index
    space (a transaction's), carried by the refusal."""
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object", index)
    kind = raw.get("op")
    if type(kind) is not str or kind not in OP_FIELDS:  # an unhashable op (an object, a list) too
        raise bad_request(f"{where}: op must be one of {', '.join(KV_OPS)}", index)
    unknown = sorted(raw.keys() - OP_FIELDS[kind] - extra_fields)
    if unknown:
        raise bad_request(f"{where}: unknown field(s) for {kind}: {', '.join(unknown)}", index)
    op: dict[str, Any] = {"op": kind, "ns": _name(raw, "ns", where, index), "key": _name(raw, "key", where, index)}
    if kind in VALUE_OPS:
        if "value" not in raw:
            raise bad_request(f"{where}: {kind} needs a value", index)
        check_wire_value(raw["value"], where, index)
        op["value"] = raw["value"]
    if kind in EXPIRY_OPS:
        op["ttlSeconds"] = ttl_of(raw, where, index)
    if kind == "incr":
        by = raw.get("by", 1)
        if not is_int(by):
            raise bad_request(f"{where}: by must be an integer", index)
        op["by"] = by
    if kind == "check":
        expected = raw.get("expectedVersion")
        if expected is not None and not is_int(expected):
            raise bad_request(f"{where}: expectedVersion must be an integer, or null for absent", index)
        op["expectedVersion"] = expected
    return op


def parse_kv_batch(body: Any) -> list[dict]:
    if not isinstance(body, dict) or not isinstance(body.get("ops"), list):
        raise bad_request('the body must be {"ops": [...]}')
    extra = sorted(body.keys() - {"ops"})
    if extra:
        raise bad_request(f"unknown top-level field(s): {', '.join(extra)}")
    raw_ops = body["ops"]
    if not raw_ops or len(raw_ops) > MAX_KV_OPS:
        raise bad_request(f"ops must hold 1..{MAX_KV_OPS} operations")
    return [parse_kv_op(raw, f"ops[{i}]", i) for i, raw in enumerate(raw_ops)]


def refusal_of(result: dict) -> ApiError:
    """The state's refusal of a kv entry as the wire's error, with the index it blames."""
    code = result["error"]
    status = {KV_PRECONDITION: 409, BAD_REQUEST: 400, ANSWER_TOO_LARGE: 413}.get(code, 500)
    return ApiError(status, code, result.get("message") or "the kv batch was refused",
                    fields={"index": result.get("index")})


async def _run(request: web.Request, ops: list[dict]) -> list[dict]:
    serving = serving_of(request)
    access = Access.READ if all(op["op"] in READ_OPS for op in ops) else Access.STORE
    principal = require(serving.config, request, access)
    command = {"op": "kv", "ops": ops, "maxAnswerBytes": MAX_ANSWER_BYTES}
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        raise refusal_of(result)
    return result["results"]


def _path_key(request: web.Request) -> tuple[str, str]:
    ns, key = request.match_info["ns"], request.match_info.get("key", "")
    if key == "":
        raise bad_request("the path needs a key after the namespace")
    return ns, key


async def post_kv(request: web.Request) -> web.Response:
    serving = serving_of(request)
    require(serving.config, request, Access.READ)  # 401 before the body is read; the level is checked per batch below
    return json_response({"results": await _run(request, parse_kv_batch(await json_body(request, BAD_REQUEST)))})


async def get_kv(request: web.Request) -> web.Response:
    """A linearizable read: after the read barrier, on local state, no entry of its own."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    ns, key = _path_key(request)
    row = await read(serving, principal.tenant, lambda state: state.kv_get(ns, key), UNAVAILABLE)
    if row is None:
        row = {"ns": ns, "key": key, "found": False, "value": None, "version": None, "expiresAt": None}
    return json_response(row)


async def put_kv(request: web.Request) -> web.Response:
    serving = serving_of(request)
    require(serving.config, request, Access.STORE)
    ns, key = _path_key(request)
    body = await json_body(request, BAD_REQUEST)
    if not isinstance(body, dict):
        raise bad_request('the body must be {"value", "ttlSeconds"? | "forever"?}')
    op = parse_kv_op({**body, "op": "put", "ns": ns, "key": key}, "body")
    return json_response((await _run(request, [op]))[0])


async def delete_kv(request: web.Request) -> web.Response:
    serving = serving_of(request)
    require(serving.config, request, Access.STORE)
    ns, key = _path_key(request)
    return json_response((await _run(request, [{"op": "delete", "ns": ns, "key": key}]))[0])


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/kv", post_kv)
    path = f"/api/v1/kv/{{ns}}/{{key:{CATCH_ALL}}}"
    app.router.add_get(path, get_kv)
    app.router.add_put(path, put_kv)
    app.router.add_delete(path, delete_kv)
