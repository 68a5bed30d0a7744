"""Operator switches of a tenant (admin tokens only): pause and resume timer scheduling.

Pausing refuses POST /api/v1/timers with 503 timers_disabled; the fire and the DELETE route go on
(seeds/timer-routes.md: only an operator stops fires, with QUEEN_RAFT_TIMER_TICK_MS=0).
"""

from __future__ import annotations

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.group_calls import propose
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


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/admin/timers/pause", post_pause)
    app.router.add_post("/api/v1/admin/timers/resume", post_resume)
