"""GET /health (docs/spec.md section 5): each group's Raft view from this node, no barrier; GET /metrics:
the node's meters (metrics.py) in Prometheus text. Both public.

200 "healthy" when every group has a leader and none has a problem; 503 "settling" while a group has
no leader; 503 "unhealthy" when a group has a problem, named in its `problem`:
- `state_not_loaded`: the group could not load its state (the Raft layer sets `loadError` in status);
- `not_applying`: its applied index has stayed behind its commit index, without moving, for
  APPLY_STALL_S: what it serves is stale and will stay so (a state that failed to load, an entry
  whose apply keeps failing). A node catching up moves its applied index, so it is not flagged;
- `disk_full`: its journal cannot write (full disk or a failed flush): it refuses writes with 503
  `disk_full` and still serves reads.
- `term_not_stored`: its last store of a Raft term or vote failed while the journal writes
  (raft/stored_term.py): it takes no newer term, so it neither votes nor follows the group's
  leader (though its `leader` may name that leader) and its calls time out. Cleared by the first
  store that succeeds.
Each is 503 "unhealthy" alike, the problems that still serve something included: a load balancer
should send the node nothing while any of its groups has one. A data dir that takes no writes at
all fails both the journal and the term store: it is named `disk_full`, whose fix (a writable data
dir) clears both.
Each group also names how this node's link to each peer is framed (`peerLinks`, raft/peer_links.py):
what an operator checks during a rolling upgrade; it does not change the verdict.
A load balancer that polls /health so sends nobody to a node that would answer from a stale state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp import web

from queen_raft.api.requests import json_response
from queen_raft.api.serving import serving_of

log = logging.getLogger(__name__)

STATUS_FIELDS = ("role", "leader", "term", "commitIndex", "appliedIndex")
# Longer than any pause of the apply thread seen (a full GC, a 256-fire batch, a snapshot fork are
# well under a second) and short enough that a load balancer stops sending to a stuck node soon.
APPLY_STALL_S = 10.0

STATE_NOT_LOADED = "state_not_loaded"
NOT_APPLYING = "not_applying"
DISK_FULL = "disk_full"
TERM_NOT_STORED = "term_not_stored"
PROBLEMS = (STATE_NOT_LOADED, NOT_APPLYING, DISK_FULL, TERM_NOT_STORED)


class ApplyWatch:
    """Per tenant, since when its applied index has stayed where it is while behind its commit
    index (as seen by the /health calls: the first call that sees it behind starts the clock)."""

    def __init__(self, stall_s: float = APPLY_STALL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self._clock = clock
        self._behind_since: dict[str, tuple[int, float]] = {}

    def is_stalled(self, tenant: str, applied, commit) -> bool:
        if not isinstance(applied, int) or not isinstance(commit, int) or applied >= commit:
            self._behind_since.pop(tenant, None)
            return False
        now = self._clock()
        seen = self._behind_since.get(tenant)
        if seen is None or seen[0] != applied:
            self._behind_since[tenant] = (applied, now)
            return False
        return now - seen[1] >= self.stall_s


APPLY_WATCH_KEY = web.AppKey("apply_watch", ApplyWatch)


def group_problem(tenant: str, status: dict, watch: ApplyWatch) -> str | None:
    if status.get("loadError"):
        return STATE_NOT_LOADED
    if watch.is_stalled(tenant, status.get("appliedIndex"), status.get("commitIndex")):
        return NOT_APPLYING
    if status.get("diskFull"):
        return DISK_FULL
    if (status.get("termStore") or {}).get("failing"):
        return TERM_NOT_STORED
    return None


async def get_health(request: web.Request) -> web.Response:
    body = health_body(serving_of(request), request.app[APPLY_WATCH_KEY])
    return json_response(body, status=200 if body["status"] == "healthy" else 503)


def health_body(serving, watch: ApplyWatch) -> dict:
    """The /health answer of this node (also a part of GET /api/v1/overview)."""
    groups = {}
    every_group_led, problems = True, False
    for tenant, group in serving.groups.items():
        try:
            status = group.status()
        except Exception:  # a group that is starting or stopping is reported, not raised
            log.exception("health: group %s has no status", tenant)
            status = {"role": "unknown", "leader": None}
        problem = group_problem(tenant, status, watch)
        groups[tenant] = {**{name: status.get(name) for name in STATUS_FIELDS}, "problem": problem,
                          "peerLinks": {peer: link["frame"] for peer, link in (status.get("peerLinks") or {}).items()}}
        every_group_led = every_group_led and bool(status.get("leader"))
        problems = problems or problem is not None
    verdict = "unhealthy" if problems else "healthy" if every_group_led else "settling"
    # The cluster's name with the node's id: a launcher tells its own node from another cluster's
    # process that holds the same port.
    return {"status": verdict, "node": serving.node_id, "cluster": serving.config.name, "groups": groups}


async def get_metrics(request: web.Request) -> web.Response:
    body = serving_of(request).metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def add_routes(app: web.Application) -> None:
    app[APPLY_WATCH_KEY] = ApplyWatch()
    app.router.add_get("/health", get_health)
    app.router.add_get("/metrics", get_metrics)
