"""POST /api/v1/transaction: pushes, acks, KV ops and timer ops in one entry, all or nothing.

The answers (docs/api.md):

- 200 `{"success": true, "results": [...]}`, the results in one index space: `operations`, then `kv`,
  then `timers`.
- 200 `{"success": false, "reason", "error", "index"?}` when the state rolled the entry back
  (`rejected_ack`, `duplicate`, `kv_precondition`, `bad_request`, `too_large`,
  `timers_quota_exceeded`, `timer_not_pending`): the entry was committed, it changed nothing but the group clock.
- A refusal before anything is proposed keeps the wire's error shape and adds the transaction's
  fields: 400 `{"error": "bad_request", "message", "success": false, "reason": "bad_request",
  "index"?}` for a bad body, 413 with reason `too_large` when the entry would pass the Raft entry
  bound, 503 `timers_disabled` with reason `paused` when it schedules a timer while an operator paused
  scheduling (every 503's reason is one of errors.UNAVAILABLE_REASONS).

A push operation is one message (`{"type": "push", "queue", "payload", ...}`) or, as Queen 2.x
clients send it, several (`{"type": "push", "items": [{"queue", "partition"?, "payload",
"transactionId"?}, ...]}`): each item takes its own place in the index space, in order, and counts
against the cap on a transaction's items. `requiredLeases: [leaseId, ...]` makes the transaction
commit only while each of those leases is alive (held and not expired at the entry's group now);
else it is rolled back with reason `rejected_ack`. Naming leases reads consumption state, so it
needs read-write, like an ack.

The standalone timer route's horizon, payload ceiling and op cap do not apply to `timers` here
(docs/spec.md section 3); the entry size bound does. The pause does: it is the operator's switch for
scheduling, and a transaction that only cancels passes it, like DELETE.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from queen_raft.api import kv as kv_routes
from queen_raft.api import messages, timer_parsing, timers
from queen_raft.api.auth import Access, Principal, require
from queen_raft.api.errors import PAUSED, ApiError, retry_after_header
from queen_raft.api.group_calls import propose
from queen_raft.api.requests import json_body, json_response
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.state.limits import MAX_ANSWER_BYTES
from queen_raft.state.timer_ops import CHECK_PAYLOAD_BOUND

BAD_REQUEST = "bad_request"
TOO_LARGE = "too_large"
ANSWER_TOO_LARGE = kv_routes.ANSWER_TOO_LARGE
UNAVAILABLE = "unavailable"
TOP_LEVEL_FIELDS = frozenset({"operations", "kv", "timers", "requiredLeases"})
OPERATION_TYPES = ("push", "ack")
# Fields of an ack operation beyond those of an /ack acknowledgment: each ack names its lease.
ACK_OPERATION_FIELDS = frozenset({"type", "consumerGroup", "leaseId"})
# One entry's apply runs on every replica's tick thread: bound the items of one transaction so
# its apply stays short. Larger than the standalone timer cap (256), which does not apply here.
MAX_TRANSACTION_ITEMS = 4096


def refused(status: int, code: str, message: str, index: int | None = None,
            headers: dict[str, str] | None = None, reason: str | None = None) -> ApiError:
    """`reason` is the error code again, except on a 503, whose reason is one of every 503's."""
    return ApiError(status, code, message, headers, fields={"success": False, "reason": reason or code, "index": index})


def _list_field(body: dict, name: str) -> list:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise refused(400, BAD_REQUEST, f"{name} must be an array")
    return value


def flatten_operations(raw_operations: list) -> list[tuple[Any, str, bool]]:
    """Each operation with the field that names it and whether it is an item of a push's `items`:
    a push of several items becomes one push per item, in order (`operations[i].items[j]`). The
    items themselves are checked in the next step."""
    flat: list[tuple[Any, str, bool]] = []
    for i, raw in enumerate(raw_operations):
        where = f"operations[{i}]"
        if not (isinstance(raw, dict) and raw.get("type") == "push" and "items" in raw):
            flat.append((raw, where, False))
            continue
        extra = sorted(raw.keys() - {"type", "items"})
        if extra:
            raise refused(400, BAD_REQUEST, f"{where}: a push with items takes no other field: "
                          f"{', '.join(extra)} (each item names its own queue, partition, payload)", len(flat))
        items = raw["items"]
        if not isinstance(items, list) or not items:
            raise refused(400, BAD_REQUEST, f"{where}.items must be a non-empty array", len(flat))
        flat.extend((item, f"{where}.items[{j}]", True) for j, item in enumerate(items))
    return flat


def parse_required_leases(body: dict) -> list[str]:
    """`requiredLeases`: lease ids, each a non-empty string, at most MAX_TRANSACTION_ITEMS."""
    leases = _list_field(body, "requiredLeases")
    if len(leases) > MAX_TRANSACTION_ITEMS:
        raise refused(400, BAD_REQUEST,
                      f"requiredLeases: {len(leases)} is over the cap of {MAX_TRANSACTION_ITEMS} per transaction")
    for i, lease_id in enumerate(leases):
        if not isinstance(lease_id, str) or lease_id == "":
            raise refused(400, BAD_REQUEST, f"requiredLeases[{i}] must be a non-empty string (a leaseId)")
        try:
            messages.check_name(lease_id, "leaseId", f"requiredLeases[{i}]")
        except ApiError as error:
            raise refused(400, BAD_REQUEST, error.message) from None
    return leases


def parse_operation(raw: Any, index: int, where: str | None = None, push_item: bool = False) -> dict:
    """One operation at `index` of the one index space; `where` names its field in the body. An
    item of a push's `items` is a push by where it stands: it carries no `type` of its own."""
    where = where or f"operations[{index}]"
    if push_item:
        try:
            return {"type": "push", **messages.parse_push_item(raw, where)}
        except ApiError as error:
            raise refused(400, BAD_REQUEST, error.message, index) from None
    if not isinstance(raw, dict):
        raise refused(400, BAD_REQUEST, f"{where} must be an object", index)
    kind = raw.get("type")
    if kind not in OPERATION_TYPES:
        raise refused(400, BAD_REQUEST, f"{where}: type must be one of {', '.join(OPERATION_TYPES)}", index)
    try:
        if kind == "push":
            return {"type": "push", **messages.parse_push_item(raw, where, frozenset({"type"}))}
        item = messages.parse_ack_item(raw, where, ACK_OPERATION_FIELDS)
        for name in ("consumerGroup", "leaseId"):
            value = raw.get(name)
            if value is not None and (not isinstance(value, str) or value == ""):
                raise messages.bad_request(f"{where}: {name} must be a non-empty string")
        messages.check_name(raw.get("consumerGroup"), "consumerGroup", where)
        if not isinstance(raw.get("leaseId"), str):
            raise messages.bad_request(f"{where}: an ack needs the leaseId of the pop that delivered the message")
        return {"type": "ack", "consumerGroup": raw.get("consumerGroup"), "leaseId": raw["leaseId"], **item}
    except ApiError as error:
        raise refused(400, BAD_REQUEST, error.message, index) from None


def parse_transaction(body: Any) -> tuple[list[dict], list[dict], list[dict], list[str]]:
    """(operations, kv, timers, requiredLeases) as the state's command takes them, or a 400 naming
    the item by its place in the one index space."""
    if not isinstance(body, dict):
        raise refused(400, BAD_REQUEST, 'the body must be {"operations"?, "kv"?, "timers"?, "requiredLeases"?}')
    extra = sorted(body.keys() - TOP_LEVEL_FIELDS)
    if extra:
        raise refused(400, BAD_REQUEST, f"unknown top-level field(s): {', '.join(extra)}")
    raw_operations, raw_kv, raw_timers = (_list_field(body, name) for name in ("operations", "kv", "timers"))
    flat_operations = flatten_operations(raw_operations)
    total = len(flat_operations) + len(raw_kv) + len(raw_timers)
    if total == 0:
        raise refused(400, BAD_REQUEST, "the transaction is empty")
    if total > MAX_TRANSACTION_ITEMS:
        raise refused(400, BAD_REQUEST, f"{total} items is over the cap of {MAX_TRANSACTION_ITEMS} per transaction")
    required_leases = parse_required_leases(body)
    operations = [parse_operation(raw, i, where, push_item) for i, (raw, where, push_item) in enumerate(flat_operations)]
    kv_base = len(operations)
    kv_ops = []
    for i, raw in enumerate(raw_kv):
        try:
            kv_ops.append(kv_routes.parse_kv_op(raw, f"kv[{i}]", kv_base + i))
        except ApiError as error:
            raise refused(400, BAD_REQUEST, error.message, kv_base + i) from None
    timer_base = kv_base + len(kv_ops)
    timer_ops = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(raw_timers):
        try:
            op = timer_parsing.parse_timer_op(raw, i, f"timers[{i}]", in_transaction=True)
        except ApiError as error:
            raise refused(400, BAD_REQUEST, error.message, timer_base + i) from None
        identity = (op["queue"], op["timerKey"])
        if identity in seen:
            raise refused(400, BAD_REQUEST, f"timers[{i}]: queue {op['queue']!r} timerKey {op['timerKey']!r} appears twice",
                          timer_base + i)
        seen.add(identity)
        timer_ops.append(op)
    return operations, kv_ops, timer_ops, required_leases


def needed_access(operations: list[dict], kv_ops: list[dict], timer_ops: list[dict],
                  required_leases: list[str]) -> Access:
    """The level the whole transaction needs: an ack, a cancel, a KV op or a required lease reads
    state (read-write); pushes and schedules alone are produces (write-only may)."""
    if (any(op["type"] == "ack" for op in operations) or kv_ops or required_leases
            or any(op["op"] == "cancel" for op in timer_ops)):
        return Access.CONSUME
    return Access.PRODUCE


def encrypt_items(serving: ServingNode, tenant: str, operations: list[dict], timer_ops: list[dict]) -> tuple[list, list]:
    """Pushes and schedules for encrypting queues are encrypted here, by the proposing node, as on
    their own routes; a client `encrypted: true` on such a queue is a 400."""
    group = serving.groups[tenant]
    try:
        encrypting = timers.encrypting_queues(serving, group, timer_ops)
        timer_ops = [timers.encrypt_op(serving, op) if op["op"] != "cancel" and op["queue"] in encrypting else op
                     for op in timer_ops]
    except ApiError as error:  # the timer route's codes, as a transaction's reasons
        if error.status == 400:
            raise refused(400, BAD_REQUEST, error.message) from None
        if error.status == 413:  # a zstd payload that inflates past the bound before encryption
            raise refused(413, TOO_LARGE, error.message) from None
        raise
    pushes = [op for op in operations if op["type"] == "push"]
    encrypted_pushes = iter(messages.encrypt_push_items(serving, tenant, pushes))
    operations = [next(encrypted_pushes) if op["type"] == "push" else op for op in operations]
    return operations, timer_ops


async def _transaction_body(request: web.Request) -> Any:
    """The body, its refusals (not JSON, a lone surrogate, over the ceiling) in the transaction's
    shape: a client keys on `reason` whenever `success` is false."""
    try:
        return await json_body(request, BAD_REQUEST)
    except ApiError as error:
        if error.status == 413:
            raise refused(413, TOO_LARGE, error.message) from None
        raise refused(error.status, error.code, error.message) from None


async def post_transaction(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.PRODUCE)  # 401 before the body is read
    operations, kv_ops, timer_ops, required_leases = parse_transaction(await _transaction_body(request))
    require(serving.config, request, needed_access(operations, kv_ops, timer_ops, required_leases))
    return await _commit(serving, principal, operations, kv_ops, timer_ops, required_leases)


async def _commit(serving: ServingNode, principal: Principal, operations: list[dict], kv_ops: list[dict],
                  timer_ops: list[dict], required_leases: list[str]) -> web.Response:
    tenant = principal.tenant
    group = serving.groups[tenant]
    schedules = any(op["op"] != "cancel" for op in timer_ops)
    if schedules and group.peek_local(lambda state: state.scheduling_paused):
        serving.metrics.count_schedule_rejected("timers_disabled")
        raise refused(503, "timers_disabled", "an operator paused timer scheduling for this tenant",
                      headers=retry_after_header(timers.TIMERS_DISABLED_RETRY_AFTER_S), reason=PAUSED)
    operations, timer_ops = encrypt_items(serving, tenant, operations, timer_ops)
    timer_ops = timers.with_message_ids(timer_ops)
    command = {
        "op": "transaction", "producerSub": principal.sub, "maxPending": serving.config.timers_max_pending(tenant),
        "policy": serving.settings.fire_policy(), "operations": operations, "kv": kv_ops, "timers": timer_ops,
        "maxAnswerBytes": MAX_ANSWER_BYTES, CHECK_PAYLOAD_BOUND: True,
    }
    if required_leases:  # absent otherwise: the entry is the one written before the field existed
        command["requiredLeases"] = required_leases
    try:
        result = await propose(serving, tenant, command, UNAVAILABLE)
    except ApiError as error:
        if error.status == 413:  # the Raft entry bound, checked before proposing
            raise refused(413, TOO_LARGE, error.message) from None
        raise
    if result.get("success"):
        serving.metrics.count_timer_ops(tenant, timer_ops, result["results"][len(operations) + len(kv_ops):])
        return json_response({"success": True, "results": result["results"]})
    if "reason" not in result:  # not a verdict of the transaction: a malformed command, a bug
        raise ApiError(500, result.get("error", "internal"), result.get("message") or "the transaction failed")
    if result["reason"] == "timers_disabled":  # paused by an entry this node had not applied at the gate
        serving.metrics.count_schedule_rejected("timers_disabled")
        raise refused(503, "timers_disabled", "an operator paused timer scheduling for this tenant",
                      headers=retry_after_header(timers.TIMERS_DISABLED_RETRY_AFTER_S), reason=PAUSED)
    if result["reason"] == ANSWER_TOO_LARGE:  # rolled back: nothing changed, like any refusal here
        raise refused(413, ANSWER_TOO_LARGE, result.get("error") or "the answer is too large", result.get("index"))
    if result["reason"] == "timers_quota_exceeded":
        serving.metrics.count_schedule_rejected("timers_quota_exceeded")
    answer = {"success": False, "reason": result["reason"], "error": result.get("error") or result["reason"]}
    if result.get("index") is not None:
        answer["index"] = result["index"]
    return json_response(answer)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/transaction", post_transaction)
