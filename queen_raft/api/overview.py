"""GET /api/v1/overview: what the dashboard shows, in one read for the token's tenant.

- `nodes`: every node of the cluster with its /health answer (this node's own, the others' asked
  over HTTP with a short timeout: an unreachable node is listed with `reachable: false`), and per
  group the node that leads it (`leaderNode`), `lag`: the leader's commit index minus this
  node's applied index (null while no reachable node leads the group), and `peerLinkNodes`: the
  node id of each Raft address in its `peerLinks` (null for an address of no configured node).
- `queues`: per queue, pending timers, the next due instant, messages not yet consumed by the
  slowest consumer group (`unsettledMessages`) and dead letters (state/summary.py).
- `counters`: the tenant's replicated counters (fires by result: a client derives fires/s from two
  answers), and whether an operator paused scheduling.
- `fireLag`: this node's fire lag histogram of the tenant (observed while it leads the group).
- `firedByQueue`: this node's fires of the tenant by queue, counted while it leads the group (a
  client derives each queue's fires/s from two answers of the leader).
- `may`: what the token's level allows, so a page can hide the buttons it would be refused.
Read-only (any level that may read), after the read barrier like every read.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from queen_raft.api.auth import ALLOWED_LEVELS, Access, require
from queen_raft.api.group_calls import read
from queen_raft.api.health import APPLY_WATCH_KEY, health_body
from queen_raft.api.requests import json_response
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.clock import wall_ms
from queen_raft.config import ClusterConfig
from queen_raft.raft.peer_links import FRAME_KINDS as PEER_LINK_FRAMES
from queen_raft.state.summary import queue_summaries
from queen_raft.tls_trust import client_ssl_context

UNAVAILABLE = "unavailable"
# A peer that does not answer its /health in this time is shown unreachable; well under the
# dashboard's 2 s refresh so a dead node never stalls the page.
PEER_TIMEOUT_S = 1.0


async def peer_health(session: aiohttp.ClientSession, url: str) -> dict:
    """A peer's /health body (200 and 503 both carry it), or `{"error": why}`."""
    try:
        async with session.get(f"{url}/health") as answer:
            body = await answer.json(content_type=None)
            return body if isinstance(body, dict) else {"error": f"HTTP {answer.status}: not a health answer"}
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        return {"error": str(exc) or type(exc).__name__}


async def node_views(serving: ServingNode, own_health: dict) -> list[dict]:
    peers = [node for node in serving.config.nodes if node.id != serving.node_id]
    answers: list[dict] = []
    if peers:
        timeout = aiohttp.ClientTimeout(total=PEER_TIMEOUT_S)
        # https:// peers are verified against QUEEN_CACERT (or the system's trust store).
        connector = aiohttp.TCPConnector(ssl=client_ssl_context())
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            answers = list(await asyncio.gather(*(peer_health(session, node.http_url) for node in peers)))
    by_id = {serving.node_id: own_health, **{node.id: answer for node, answer in zip(peers, answers)}}
    views = []
    for node in serving.config.nodes:
        body = by_id[node.id]
        view = {"node": node.id, "url": node.http_url, "reachable": "error" not in body,
                "status": body.get("status"), "groups": body.get("groups") or {}}
        if "error" in body:
            view["error"] = body["error"]
        views.append(view)
    add_leaders_and_lag(serving.config, views)
    return views


def add_leaders_and_lag(config: ClusterConfig, views: list[dict]) -> None:
    """Per group on each node: `leaderNode` (the node id of its leader's Raft address), `lag`, and
    `peerLinkNodes` (the node id of each peer link's Raft address)."""
    for tenant in config.tenants:
        by_addr = {node.raft_addr(tenant.index): node.id for node in config.nodes}
        leading = [v["groups"][tenant.name] for v in views
                   if v["groups"].get(tenant.name, {}).get("role") == "leader"]
        leader = max(leading, key=lambda g: g.get("term") or 0, default=None)
        for view in views:
            group = view["groups"].get(tenant.name)
            if group is None:
                continue
            group["leaderNode"] = by_addr.get(group.get("leader"))
            group["peerLinkNodes"] = {addr: by_addr.get(addr) for addr in group.get("peerLinks") or {}}
            applied = group.get("appliedIndex")
            leader_commit = None if leader is None else leader.get("commitIndex")
            group["lag"] = (max(0, leader_commit - applied)
                            if isinstance(applied, int) and isinstance(leader_commit, int) else None)


def read_tenant_view(state) -> dict:
    counters = state.counters()
    return {"queues": queue_summaries(state), "counters": counters, "schedulingPaused": bool(state.scheduling_paused)}


async def get_overview(request: web.Request) -> web.Response:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.READ)
    tenant_view = await read(serving, principal.tenant, read_tenant_view, UNAVAILABLE)
    nodes = await node_views(serving, health_body(serving, request.app[APPLY_WATCH_KEY]))
    may = {"cancel": principal.level in ALLOWED_LEVELS[Access.CONSUME],
           "replay": principal.level in ALLOWED_LEVELS[Access.CONSUME],
           "admin": principal.level in ALLOWED_LEVELS[Access.ADMIN]}
    return json_response({
        "node": serving.node_id, "tenant": principal.tenant, "level": principal.level, "may": may,
        "nowMs": wall_ms(), **tenant_view,
        "fireLag": serving.metrics.fire_lag_seconds.snapshot(principal.tenant),
        "firedByQueue": serving.metrics.fired_by_queue_snapshot(principal.tenant), "nodes": nodes,
    })


# The answer's JSON schema, for the OpenAPI document (api/openapi.py).
_INT = {"type": "integer"}
_NULL_INT = {"type": ["integer", "null"]}
_NULL_STR = {"type": ["string", "null"]}
_GROUP_VIEW = {"type": "object", "properties": {
    "role": _NULL_STR, "leader": _NULL_STR, "leaderNode": _NULL_STR, "term": _NULL_INT, "commitIndex": _NULL_INT,
    "appliedIndex": _NULL_INT, "problem": _NULL_STR,
    "lag": {"type": ["integer", "null"], "description": "the leader's commit index minus this node's applied index"},
    "peerLinks": {"type": "object", "additionalProperties": {"enum": list(PEER_LINK_FRAMES)},
                  "description": "as in GET /health: each peer's Raft address and its link's frame"},
    "peerLinkNodes": {"type": "object", "additionalProperties": _NULL_STR,
                      "description": "the node id of each Raft address in peerLinks (null: no configured node)"}}}
ANSWER_SCHEMA = {"type": "object", "required": [
    "node", "tenant", "level", "may", "nowMs", "queues", "counters", "schedulingPaused", "fireLag", "firedByQueue",
    "nodes"],
    "properties": {
        "node": {"type": "string", "description": "the node that answered"},
        "tenant": {"type": "string"}, "level": {"type": "string"},
        "may": {"type": "object", "required": ["cancel", "replay", "admin"],
                "properties": {name: {"type": "boolean"} for name in ("cancel", "replay", "admin")},
                "description": "what the token's level allows"},
        "nowMs": {**_INT, "description": "the answering node's wall clock, unix ms"},
        "schedulingPaused": {"type": "boolean"},
        "counters": {"type": "object", "description": "the tenant's replicated counters, as GET /api/v1/usage"},
        "queues": {"type": "array", "items": {"type": "object", "required": [
            "queue", "pendingTimers", "nextDueAt", "unsettledMessages", "dlqCount"], "properties": {
            "queue": {"type": "string"}, "pendingTimers": _INT, "unsettledMessages": _INT, "dlqCount": _INT,
            "nextDueAt": {**_NULL_INT, "description": "the earliest dueAt of the queue's timers"},
            "nextDueAfter": {**_INT, "description": "present when nextDueAt was not searched that far: the queue's "
                                                    "earliest timer is due later than this"}}}},
        "fireLag": {"type": "object", "required": ["boundsSeconds", "bucketCounts", "count", "sumSeconds"],
                    "description": "this node's fire lag histogram of the tenant; bucketCounts are per bucket "
                                   "(not cumulative), one more than boundsSeconds (the last is past the largest)",
                    "properties": {"boundsSeconds": {"type": "array", "items": {"type": "number"}},
                                   "bucketCounts": {"type": "array", "items": _INT}, "count": _INT,
                                   "sumSeconds": {"type": "number"}}},
        "firedByQueue": {"type": "object", "additionalProperties": _INT,
                         "description": "this node's fires (any result) of the tenant by queue, counted while it "
                                        "leads the group; past 100 queues the rest count under \"__other__\""},
        "nodes": {"type": "array", "items": {"type": "object", "required": ["node", "url", "reachable", "status", "groups"],
                  "properties": {"node": {"type": "string"}, "url": {"type": "string"}, "reachable": {"type": "boolean"},
                                 "status": _NULL_STR, "error": {"type": "string"},
                                 "groups": {"type": "object", "additionalProperties": _GROUP_VIEW}}}},
    }}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/overview", get_overview)
