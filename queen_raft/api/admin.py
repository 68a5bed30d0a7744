"""Operator routes of a tenant (admin tokens only): pause and resume timer scheduling, and usage.

Pausing refuses POST /api/v1/timers with 503 timers_disabled; the fire and the DELETE route go on
(docs/spec.md section 2: the fire never switches itself off; an operator stops it with
QUEEN_RAFT_TIMER_TICK_MS=0).
"""

from __future__ import annotations

from aiohttp import web

from queen_raft.api import snapshot_route
from queen_raft.api.auth import Access, require
from queen_raft.api.group_calls import propose, read
from queen_raft.api.requests import json_response
from queen_raft.api.serving import serving_of

UNAVAILABLE = "unavailable"


async def _switch(request: web.Request, action: str) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.ADMIN)
    result = await propose(serving, principal.tenant, {"op": "admin", "action": action}, UNAVAILABLE)
    return json_response({"tenant": principal.tenant, "paused": bool(result.get("paused"))})


async def post_pause(request: web.Request) -> web.Response:
    return await _switch(request, "pause")


async def post_resume(request: web.Request) -> web.Response:
    return await _switch(request, "resume")


async def get_usage(request: web.Request) -> web.Response:
    """docs/spec.md section 2, Metering: each schedule or reschedule op and each push item is one billed message; a
    cancel and a fire none. The counters are replicated state, read after the barrier, so every
    node answers the same figures, exact after a failover."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.ADMIN)
    counters, paused = await read(serving, principal.tenant, lambda state: (state.counters(), state.scheduling_paused),
                                  UNAVAILABLE)
    fired = counters.get("fired", {})
    return json_response({
        "tenant": principal.tenant,
        "billedMessages": counters.get("billedMessages", 0),
        "pushedMessages": counters.get("pushedMessages", 0),
        "pendingTimers": counters.get("pendingTimers", 0),
        "fired": {name: fired.get(name, 0) for name in ("appended", "duplicate", "failed", "dlq")},
        "schedulingPaused": bool(paused),
    })


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/admin/timers/pause", post_pause)
    app.router.add_post("/api/v1/admin/timers/resume", post_resume)
    app.router.add_get("/api/v1/usage", get_usage)
    snapshot_route.add_routes(app)
