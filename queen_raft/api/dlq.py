"""The dead-letter list of a tenant and the replay of one row (docs/spec.md sections 2 and 3).

A row's payload is shown as stored (base64, with its `payloadZstd` and `encrypted` flags), like a
timer peek: the list is an operator's view of what failed, not a delivery, so nothing is decrypted.
"""

from __future__ import annotations

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.codec import encode_base64
from queen_raft.api.errors import ApiError
from queen_raft.api.group_calls import propose, read
from queen_raft.api.ids import new_message_id
from queen_raft.api.requests import json_response, query_int
from queen_raft.api.serving import serving_of
from queen_raft.state.dlq_pages import dlq_seq_of
from queen_raft.state.limits import MAX_ANSWER_BYTES

BAD_REQUEST = "bad_request"
UNAVAILABLE = "unavailable"
# Same bounds as the timer list: a page is a bounded answer, clamped rather than refused.
DLQ_DEFAULT_LIMIT = 100
DLQ_MAX_LIMIT = 1000

ROW_FIELDS = ("dlqId", "queue", "partition", "consumerGroup", "offset", "transactionId", "messageId", "payload",
              "payloadZstd", "encrypted", "createdAt", "producerSub", "traceId", "error", "attempts", "failedAt",
              "timerKey")


def wire_row(row: dict) -> dict:
    out = {name: row.get(name) for name in ROW_FIELDS}
    payload = out["payload"]
    out["payload"] = encode_base64(bytes(payload)) if isinstance(payload, (bytes, bytearray)) else None
    out["payloadZstd"] = bool(out["payloadZstd"])
    out["encrypted"] = bool(out["encrypted"])
    return out


def query_after(request: web.Request) -> int:
    """`after`: the `nextAfter` of the previous page (a dlqId), as the n of its `dlq-<n>`; 0 when absent."""
    text = request.query.get("after")
    if not text:
        return 0
    after_seq = dlq_seq_of(text)
    if after_seq is None:
        raise ApiError(400, BAD_REQUEST, f"query parameter after must be a dlqId (dlq-<n>, a page's nextAfter), "
                                         f"got {text!r}")
    return after_seq


async def get_dlq(request: web.Request) -> web.Response:
    """One page in filing order (`dlq-<n>` ascending, across queues too); the contract's route with an
    `after` cursor added: `{rows, truncated, nextAfter}` as for the timer list."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    queue = request.query.get("queue") or None
    limit = min(DLQ_MAX_LIMIT, max(1, query_int(request, "limit", DLQ_DEFAULT_LIMIT, BAD_REQUEST)))
    after_seq = query_after(request)
    page = await read(serving, principal.tenant,
                      lambda state: state.dlq_page(queue, after_seq, limit, MAX_ANSWER_BYTES), UNAVAILABLE)
    return json_response({"rows": [wire_row(row) for row in page["rows"]], "truncated": page["truncated"],
                          "nextAfter": page["nextAfter"]})


async def post_replay(request: web.Request) -> web.Response:
    """Pushes the row's payload again under a new messageId (also its transactionId: the original
    txn would be a duplicate inside the dedup window). A timer's row is refused: it never had a
    consumer group or a position to go back to."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    command = {"op": "dlq_replay", "dlqId": request.match_info["dlqId"], "messageId": new_message_id()}
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        code = result["error"]
        status = {"dlq_replay_refused": 409, "not_found": 404, BAD_REQUEST: 400}.get(code, 500)
        raise ApiError(status, code, result.get("message") or f"replay refused: {code}")
    return json_response(result)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/dlq", get_dlq)
    app.router.add_post("/api/v1/dlq/{dlqId}/replay", post_replay)
