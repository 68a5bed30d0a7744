"""POST /api/v1/configure: a queue's options (docs/spec.md section 3), replicated like any write."""

from __future__ import annotations

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.errors import ApiError
from queen_raft.api.group_calls import propose
from queen_raft.api.messages import check_name
from queen_raft.api.requests import json_body, json_response
from queen_raft.api.serving import serving_of
from queen_raft.state.limits import DEFAULT_QUEUE_OPTIONS
from queen_raft.state.queue import validate_options

BAD_REQUEST = "bad_request"
UNAVAILABLE = "unavailable"
MODES = ("merge", "replace")


async def post_configure(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONFIGURE)
    body = await json_body(request, BAD_REQUEST)
    if not isinstance(body, dict):
        raise ApiError(400, BAD_REQUEST, 'the body must be {"queue", "options", "mode"?}')
    extra = sorted(body.keys() - {"queue", "options", "mode"})
    if extra:
        raise ApiError(400, BAD_REQUEST, f"unknown field(s): {', '.join(extra)}")
    queue, options, mode = body.get("queue"), body.get("options", {}), body.get("mode", "merge")
    if not isinstance(queue, str) or queue == "":
        raise ApiError(400, BAD_REQUEST, "queue must be a non-empty string")
    check_name(queue, "queue", "body")
    if not isinstance(options, dict):
        raise ApiError(400, BAD_REQUEST, "options must be an object")
    if mode not in MODES:
        raise ApiError(400, BAD_REQUEST, f"mode must be one of {', '.join(MODES)}")
    # Each value is checked here too, the same way the state checks it (whatever the base), so a bad
    # one is refused before it is proposed: an integer past 64 bits could not even be encoded.
    refused = validate_options(options, DEFAULT_QUEUE_OPTIONS)
    if isinstance(refused, str):
        raise ApiError(400, BAD_REQUEST, refused)
    if options.get("encryptionEnabled") is True and serving.cipher is None:
        # Said here rather than later: this node could not encrypt what it is then sent.
        raise ApiError(400, BAD_REQUEST, "encryptionEnabled needs QUEEN_ENCRYPTION_KEY on the node; this node has none")
    command = {"op": "configure", "queue": queue, "options": options, "mode": mode}
    result = await propose(serving, principal.tenant, command, UNAVAILABLE)
    if "error" in result:
        status = 400 if result["error"] == BAD_REQUEST else 500
        raise ApiError(status, result["error"], result.get("message") or "configure refused")
    return json_response(result)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/configure", post_configure)
