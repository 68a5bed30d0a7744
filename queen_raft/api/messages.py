"""Messages routes (docs/spec.md section 3): push, ack, lease extend, fetch (pop: pop_route.py)."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.codec import PayloadDecodeError, decode_base64, encode_base64, json_value_to_bytes, payload_fields
from queen_raft.api.encryption import PayloadCipher, PayloadDecryptError
from queen_raft.api.errors import ApiError
from queen_raft.api.group_calls import propose, read
from queen_raft.api.ids import new_message_id, new_message_ids
from queen_raft.api.push_parsing import (
    MAX_PUSH_ITEMS, encrypt_push_rows, plain_push_rows, push_command, push_items_of, queues_to_encrypt,
)
from queen_raft.api.requests import body_bytes, is_int, json_body, json_response, parse_json
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.api.timer_parsing import NAME_CHARS_ALWAYS_WITHIN, name_over_limit
from queen_raft.api.wire_json import NOT_READ, loads_without_integer_scan, may_hold_wide_integer
from queen_raft.state.limits import DEFAULT_PARTITION, MAX_ANSWER_BYTES, MAX_NAME_BYTES, MAX_POP_BATCH  # noqa: F401
from queen_raft.state.message_items import ACK_STATUSES
from queen_raft.state.push_rows import PUSH_ROW_FIELDS

BAD_REQUEST = "bad_request"
ANSWER_TOO_LARGE = "answer_too_large"
UNAVAILABLE = "unavailable"

# One call is one Raft entry: bound the items so an entry stays small enough to replicate fast.
MAX_ACK_ITEMS = 1000
MAX_FETCH_ENTRIES = 64
# Pop (pop_route.py): the longest a long poll holds a connection (the batch bound is the state's
# MAX_POP_BATCH, imported above so the message bounds are named in one place).
DEFAULT_POP_TIMEOUT_MS = 30_000
MAX_POP_TIMEOUT_MS = 60_000
# A long poll re-checks through a read barrier at least this often even when nothing applied:
# time alone (a lease expiring, delayedProcessing ending) can make a message deliverable, and the
# group clock only moves with entries, which the barrier provides.
LONG_POLL_RECHECK_S = 1.0
FETCH_DEFAULT_LIMIT = 100
FETCH_MAX_LIMIT = 1000

PUSH_ITEM_FIELDS = frozenset({"queue", "partition", "payload", "payloadB64", "transactionId", "traceId"})
PUSH_SERVER_OWNED = frozenset({"messageId", "producerSub", "createdAt", "offset", "tenant"})
ACK_ITEM_FIELDS = frozenset({"queue", "partition", "transactionId", "offset", "status", "error"})


def bad_request(message: str) -> ApiError:
    return ApiError(400, BAD_REQUEST, message)


def _optional_string(raw: dict, name: str, where: str, default: str | None = None) -> str | None:
    value = raw.get(name, default)
    if value is not None and (not isinstance(value, str) or value == ""):
        raise bad_request(f"{where}: {name} must be a non-empty string")
    return value


def check_name(value: str | None, name: str, where: str) -> str | None:
    """`value`, or a 400 naming the field when it is over MAX_NAME_BYTES: a queue, partition,
    transactionId and consumer group are identities kept in the state, bounded like a timer's."""
    if value is not None and name_over_limit(value):
        raise bad_request(f"{where}: {name} is over {MAX_NAME_BYTES} bytes (UTF-8)")
    return value


def _optional_name(raw: dict, name: str, where: str, default: str | None = None) -> str | None:
    value = raw.get(name, default)
    if type(value) is str and 0 < len(value) <= NAME_CHARS_ALWAYS_WITHIN:
        return value  # the usual name: non-empty, and too short to pass MAX_NAME_BYTES in UTF-8
    return check_name(_optional_string(raw, name, where, default), name, where)


def wire_message(message: dict, cipher: PayloadCipher | None) -> dict:
    """A message or record as the client sees it: plaintext, as decoded JSON or payloadB64.

    A payload that cannot be decrypted here (no key on this node, or a rotated key) is shown as
    stored, with `encrypted: true`, rather than failing the whole answer."""
    out = dict(message)  # the fields in their order, less the two replaced below
    payload = bytes(out.pop("payload", b""))
    encrypted = out.pop("encrypted", False)
    if encrypted:
        try:
            if cipher is None:
                raise PayloadDecryptError("this node has no QUEEN_ENCRYPTION_KEY")
            payload = cipher.decrypt(payload)
        except PayloadDecryptError as exc:
            out.update({"payloadB64": encode_base64(payload), "encrypted": True, "decryptError": str(exc)})
            return out
    out.update(payload_fields(payload))
    return out


# --- push ------------------------------------------------------------------------------------


def parse_push_items(body: Any) -> list[dict]:
    raw_items = push_items_of(body)
    # One clock read and one os.urandom for the call's messageIds, not one of each per item.
    return [parse_push_item(raw, f"items[{i}]", message_id=message_id)
            for i, (raw, message_id) in enumerate(zip(raw_items, new_message_ids(len(raw_items))))]


def parse_push_item(raw: Any, where: str, extra_fields: frozenset[str] = frozenset(),
                    message_id: str | None = None) -> dict:
    """One push item as the state's push path takes it (messageId minted here, by the proposer,
    unless given). `extra_fields` names fields a caller handles itself (a transaction's `type`)."""
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object")
    if not raw.keys() <= PUSH_ITEM_FIELDS:  # else no field is unknown, server-owned or "_"-prefixed
        _refuse_foreign_fields(raw, where, extra_fields)
    queue = _optional_name(raw, "queue", where)
    if queue is None:
        raise bad_request(f"{where}: queue is missing")
    if ("payload" in raw) == ("payloadB64" in raw):
        raise bad_request(f"{where}: give exactly one of payload (any JSON value) or payloadB64")
    if "payload" in raw:
        try:
            payload = json_value_to_bytes(raw["payload"])
        except PayloadDecodeError as exc:
            raise bad_request(f"{where}: payload {exc}") from None
    else:
        try:
            payload = decode_base64(raw["payloadB64"])
        except PayloadDecodeError as exc:
            raise bad_request(f"{where}: payloadB64 {exc}") from None
    message_id = message_id or new_message_id()
    return {
        "queue": queue,
        "partition": _optional_name(raw, "partition", where, DEFAULT_PARTITION),
        "payload": payload,
        "transactionId": _optional_name(raw, "transactionId", where) or message_id,
        "messageId": message_id,
        "traceId": _optional_string(raw, "traceId", where),
        "encrypted": False,
    }


def _refuse_foreign_fields(raw: dict, where: str, extra_fields: frozenset[str]) -> None:
    owned = sorted(k for k in raw if k in PUSH_SERVER_OWNED or k.startswith("_"))
    if owned:
        raise bad_request(f"{where}: {', '.join(owned)} is set by the server and may not be sent")
    unknown = sorted(raw.keys() - PUSH_ITEM_FIELDS - extra_fields)
    if unknown:
        raise bad_request(f"{where}: unknown field(s) {', '.join(unknown)}")


def encrypt_push_items(serving: ServingNode, tenant: str, items: list[dict]) -> list[dict]:
    """Items for queues with encryptionEnabled are encrypted here, by the proposing node."""
    encrypting = queues_to_encrypt(serving, tenant, {item["queue"] for item in items})
    if not encrypting:
        return items
    return [dict(item, payload=serving.cipher.encrypt(item["payload"]), encrypted=True) if item["queue"] in encrypting
            else item for item in items]


# A push call travels as rows (state/push_rows.py): the same items, positional. As items (the
# older form) while a member of the group may run a version that does not apply rows.
_push_row = itemgetter(*PUSH_ROW_FIELDS)


def push_rows_of(raw: bytes) -> list[list]:
    """The rows of a push call's body: straight into rows when every item is plain (push_parsing.py),
    else item by item with every check, which gives the refusals. A plain item holds no number, so
    orjson reads without the scan for integers past 64 bits, and the checked path reads exactly."""
    body = loads_without_integer_scan(raw)
    if body is not NOT_READ:
        raw_items = push_items_of(body)
        rows = plain_push_rows(raw_items, new_message_ids(len(raw_items)))
        if rows is not None:
            return rows
    if body is NOT_READ or may_hold_wide_integer(raw):
        body = parse_json(raw, BAD_REQUEST)
    return [list(_push_row(item)) for item in parse_push_items(body)]


async def post_push(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.PRODUCE)
    rows = push_rows_of(await body_bytes(request, BAD_REQUEST))
    command = push_command(serving, principal.tenant, principal.sub, encrypt_push_rows(serving, principal.tenant, rows))
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        raise ApiError(400 if result["error"] == BAD_REQUEST else 500, result["error"], result.get("message") or "push refused")
    return json_response({"results": result["results"]}, status=201, floats_finite=True)


# --- ack -------------------------------------------------------------------------------------


def parse_ack(body: Any, single: bool) -> dict:
    if not isinstance(body, dict):
        raise bad_request("the body must be an object")
    if single and "acknowledgments" not in body:
        # The single form: one acknowledgment's fields next to consumerGroup and leaseId.
        envelope = {k: body[k] for k in ("consumerGroup", "leaseId") if k in body}
        envelope["acknowledgments"] = [{k: v for k, v in body.items() if k not in ("consumerGroup", "leaseId")}]
        body = envelope
    extra = sorted(body.keys() - {"consumerGroup", "leaseId", "acknowledgments"})
    if extra:
        raise bad_request(f"unknown top-level field(s): {', '.join(extra)}")
    raw_items = body.get("acknowledgments")
    if not isinstance(raw_items, list) or not raw_items:
        raise bad_request("acknowledgments must be a non-empty array")
    if len(raw_items) > MAX_ACK_ITEMS:
        raise bad_request(f"{len(raw_items)} acknowledgments is over the cap of {MAX_ACK_ITEMS} per call")
    consumer_group = _optional_name(body, "consumerGroup", "body")
    lease_id = _optional_string(body, "leaseId", "body")
    items = [parse_ack_item(raw, f"acknowledgments[{i}]") for i, raw in enumerate(raw_items)]
    return {"op": "ack", "consumerGroup": consumer_group, "leaseId": lease_id, "acknowledgments": items}


def parse_ack_item(raw: Any, where: str, extra_fields: frozenset[str] = frozenset()) -> dict:
    """One acknowledgment; `extra_fields` names fields the caller handles (a transaction's type,
    consumerGroup and leaseId)."""
    if type(raw) is dict and len(raw) == 3:  # the usual item: {partition, transactionId, status}
        partition, txn, status = raw.get("partition"), raw.get("transactionId"), raw.get("status")
        if (type(partition) is str and type(txn) is str and status in ACK_STATUSES
                and 0 < len(partition) <= NAME_CHARS_ALWAYS_WITHIN and 0 < len(txn) <= NAME_CHARS_ALWAYS_WITHIN):
            return {"partition": partition, "status": status, "transactionId": txn}
    if not isinstance(raw, dict):
        raise bad_request(f"{where} must be an object")
    if not raw.keys() <= ACK_ITEM_FIELDS:  # else no field is unknown (one set test, the usual case)
        unknown = sorted(raw.keys() - ACK_ITEM_FIELDS - extra_fields)
        if unknown:
            raise bad_request(f"{where}: unknown field(s) {', '.join(unknown)}")
    status = raw.get("status", "completed")
    if status not in ACK_STATUSES:
        raise bad_request(f"{where}: status {status!r} is not one of {', '.join(ACK_STATUSES)}")
    item: dict[str, Any] = {"partition": _optional_name(raw, "partition", where, DEFAULT_PARTITION), "status": status}
    if "transactionId" in raw:
        item["transactionId"] = _optional_name(raw, "transactionId", where)
    if "offset" in raw:
        if not is_int(raw["offset"]) or raw["offset"] < 0:
            raise bad_request(f"{where}: offset must be an integer >= 0")
        item["offset"] = raw["offset"]
    if item.get("transactionId") is None and "offset" not in item:
        raise bad_request(f"{where}: give transactionId or offset")
    if "queue" in raw:
        item["queue"] = _optional_name(raw, "queue", where)
    if "error" in raw:
        if not isinstance(raw["error"], str):
            raise bad_request(f"{where}: error must be a string")
        item["error"] = raw["error"]
    return item


async def _post_ack(request: web.Request, single: bool) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    command = parse_ack(await json_body(request, BAD_REQUEST), single)
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        raise ApiError(400 if result["error"] == BAD_REQUEST else 500, result["error"], result.get("message") or "ack refused")
    return json_response({"results": result["results"]}, floats_finite=True)


async def post_ack(request: web.Request) -> web.Response:
    return await _post_ack(request, single=True)


async def post_ack_batch(request: web.Request) -> web.Response:
    return await _post_ack(request, single=False)


# --- lease extend ----------------------------------------------------------------------------

# A lease is extended by at most this much per call: a consumer that needs more calls again, so
# a crashed consumer cannot pin a partition for longer than this.
MAX_LEASE_EXTEND_S = 3600


async def post_lease_extend(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    body = await json_body(request, BAD_REQUEST)
    if not isinstance(body, dict) or sorted(body.keys()) != ["seconds"]:
        raise bad_request('the body must be {"seconds": n}')
    seconds = body["seconds"]
    if not is_int(seconds) or not 1 <= seconds <= MAX_LEASE_EXTEND_S:
        raise bad_request(f"seconds must be an integer 1..{MAX_LEASE_EXTEND_S}")
    command = {"op": "lease_extend", "leaseId": request.match_info["leaseId"], "seconds": seconds}
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        status = 404 if result["error"] == "invalid_lease" else 400 if result["error"] == BAD_REQUEST else 500
        raise ApiError(status, result["error"], result.get("message") or "the lease is unknown or expired")
    return json_response(result)


# --- fetch -----------------------------------------------------------------------------------


def parse_fetch(body: Any) -> list[dict]:
    if not isinstance(body, dict) or not isinstance(body.get("entries"), list):
        raise bad_request('the body must be {"entries": [...]}')
    entries = body["entries"]
    if not entries or len(entries) > MAX_FETCH_ENTRIES:
        raise bad_request(f"entries must hold 1..{MAX_FETCH_ENTRIES} items")
    parsed = []
    for i, raw in enumerate(entries):
        where = f"entries[{i}]"
        if not isinstance(raw, dict):
            raise bad_request(f"{where} must be an object")
        unknown = sorted(raw.keys() - {"queue", "partition", "offset", "limit"})
        if unknown:
            raise bad_request(f"{where}: unknown field(s) {', '.join(unknown)}")
        queue = _optional_name(raw, "queue", where)
        if queue is None:
            raise bad_request(f"{where}: queue is missing")
        offset = raw.get("offset", 0)
        limit = raw.get("limit", FETCH_DEFAULT_LIMIT)
        if not is_int(offset) or offset < 0:
            raise bad_request(f"{where}: offset must be an integer >= 0")
        if not is_int(limit):
            raise bad_request(f"{where}: limit must be an integer")
        parsed.append({"queue": queue, "partition": _optional_name(raw, "partition", where, DEFAULT_PARTITION),
                       "offset": offset, "limit": min(FETCH_MAX_LIMIT, max(1, limit))})
    return parsed


async def post_fetch(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    entries = parse_fetch(await json_body(request, BAD_REQUEST))

    def fetch_all(state: Any) -> list[list[dict]] | None:
        """The records of every entry, or None once their payloads pass MAX_ANSWER_BYTES."""
        found, total = [], 0
        for e in entries:
            records = list(state.fetch(e["queue"], e["partition"], e["offset"], e["limit"]))
            total += sum(len(r["payload"]) for r in records)
            if total > MAX_ANSWER_BYTES and (len(found) > 0 or len(records) > 1):
                return None
            found.append(records)
        return found

    found = await read(serving, principal.tenant, fetch_all, UNAVAILABLE)
    if found is None:
        raise ApiError(413, ANSWER_TOO_LARGE, f"the answer would carry over {MAX_ANSWER_BYTES} bytes of payloads "
                                              f"(MAX_ANSWER_BYTES); fetch fewer records (limit) or entries per call")
    return json_response({"entries": [{"records": [wire_message(r, serving.cipher) for r in records]} for records in found]})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/push", post_push)
    app.router.add_post("/api/v1/ack", post_ack)
    app.router.add_post("/api/v1/ack/batch", post_ack_batch)
    app.router.add_post("/api/v1/lease/{leaseId}/extend", post_lease_extend)
    app.router.add_post("/api/v1/fetch", post_fetch)
