"""Routes for the fault harness only, registered only when QUEEN_TEST_HOOKS=1 (404 otherwise).

`POST /api/v1/test/clock {"offsetMs": n}` moves this node's clock (queen_raft.clock.set_offset_ms):
the stamps it proposes from then on are n ms off, so the harness can jump a running leader's clock
without a restart. `GET /api/v1/test/clock` says the offset in force. Both need an admin token (of
any tenant: the clock is the node's, not a tenant's). They are not in the public OpenAPI document;
openapi.TEST_HOOK_PATHS describes them for the conformance tests.

A forward jump is sticky inside each group: the group clock keeps the largest stamp it has seen
(docs/spec.md section 1), so setting the offset back to 0 does not bring a group's time back.
"""

from __future__ import annotations

from aiohttp import web

from queen_raft import clock
from queen_raft.api.auth import Access, require
from queen_raft.api.errors import ApiError
from queen_raft.api.requests import is_int, json_body, json_response
from queen_raft.api.serving import serving_of

BAD_REQUEST = "bad_request"
CLOCK_PATH = "/api/v1/test/clock"
# The harness draws jumps of up to 2^16 ms; a day is far past that, and bounds the harm of a typo:
# a group clock pushed ahead never comes back, so a year's offset would break the group for a year.
MAX_TEST_CLOCK_OFFSET_MS = 86_400_000


def clock_answer(node_id: str) -> dict:
    return {"node": node_id, "offsetMs": clock.offset_ms(), "wallMs": clock.wall_ms()}


async def post_clock(request: web.Request) -> web.Response:
    serving = serving_of(request)
    require(serving.config, request, Access.ADMIN)
    body = await json_body(request, BAD_REQUEST)
    if not isinstance(body, dict) or set(body) != {"offsetMs"}:
        raise ApiError(400, BAD_REQUEST, 'the body must be {"offsetMs": integer}')
    offset = body["offsetMs"]
    if not is_int(offset) or abs(offset) > MAX_TEST_CLOCK_OFFSET_MS:
        raise ApiError(400, BAD_REQUEST, f"offsetMs must be an integer within +-{MAX_TEST_CLOCK_OFFSET_MS}")
    clock.set_offset_ms(offset)
    return json_response(clock_answer(serving.node_id))


async def get_clock(request: web.Request) -> web.Response:
    serving = serving_of(request)
    require(serving.config, request, Access.ADMIN)
    return json_response(clock_answer(serving.node_id))


def add_routes(app: web.Application) -> bool:
    """Registers the routes when the test hooks are on; says whether it did."""
    if not clock.test_hooks_enabled():
        return False
    app.router.add_post(CLOCK_PATH, post_clock)
    app.router.add_get(CLOCK_PATH, get_clock)
    return True
