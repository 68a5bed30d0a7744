"""GET /health (docs/spec.md section 5): each group's Raft view from this node, no barrier; GET /metrics:
the node's meters (metrics.py) in Prometheus text. Both public."""

from __future__ import annotations

import logging

from aiohttp import web

from queen_raft.api.requests import json_response
from queen_raft.api.serving import serving_of

log = logging.getLogger(__name__)

STATUS_FIELDS = ("role", "leader", "term", "commitIndex", "appliedIndex")


async def get_health(request: web.Request) -> web.Response:
    serving = serving_of(request)
    groups = {}
    every_group_led = True
    for tenant, group in serving.groups.items():
        try:
            status = group.status()
        except Exception:  # a group that is starting or stopping is reported, not raised
            log.exception("health: group %s has no status", tenant)
            status = {"role": "unknown", "leader": None}
        groups[tenant] = {name: status.get(name) for name in STATUS_FIELDS}
        every_group_led = every_group_led and bool(status.get("leader"))
    body = {"status": "healthy" if every_group_led else "settling", "node": serving.node_id, "groups": groups}
    return json_response(body, status=200 if every_group_led else 503)


async def get_metrics(request: web.Request) -> web.Response:
    body = serving_of(request).metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", get_health)
    app.router.add_get("/metrics", get_metrics)
