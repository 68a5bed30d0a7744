"""How answers become history types: only what certainly did not happen is `fail`."""

from __future__ import annotations

import asyncio

from aiohttp import web

from jepsen.client import NodeClient, classify, open_session
from jepsen.history import FAIL, INFO, OK


def unavailable(reason_text: str) -> dict:
    return {"error": "timers_unavailable",
            "message": f"the tenant's group cannot answer now ({reason_text}); the outcome may be unknown"}


def test_success_and_refusals():
    assert classify(200, {"results": []}) == OK
    assert classify(400, {"error": "timers_bad_request"}) == FAIL
    assert classify(429, {"error": "rate_limited"}) == FAIL
    assert classify(503, {"error": "timers_disabled"}) == FAIL


def test_unavailable_before_proposing_is_fail_and_after_is_info():
    assert classify(503, unavailable("no_leader")) == FAIL
    assert classify(503, unavailable("busy: 9 calls in flight")) == FAIL
    assert classify(503, unavailable("leader_changed: pysyncobj FAIL_REASON 3")) == INFO
    assert classify(503, unavailable("timeout: no commit within 5000 ms")) == INFO


def test_unknown_5xx_stays_info():
    assert classify(503, {"error": "timers_unavailable", "message": "reworded"}) == INFO
    assert classify(500, {"error": "internal"}) == INFO
    assert classify(502, None) == INFO


class NodeKilledMidCancel:
    """A real aiohttp server that applies a DELETE (counts it), then closes the connection without an
    answer and stops listening: a node killed after the command committed."""

    def __init__(self) -> None:
        self.runs = 0
        self.listener: asyncio.Server | None = None
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        if request.method == "DELETE":
            self.runs += 1
            self.listener.close()
            request.transport.close()
        return web.json_response({"ok": True, "status": "cancelled"})

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        self.listener = await asyncio.get_running_loop().create_server(self.runner.server, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.listener.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc_info) -> None:
        self.listener.close()
        await self.runner.cleanup()


async def test_a_cancel_that_reached_a_node_killed_mid_request_is_info_never_fail():
    """With a plain session aiohttp resends the DELETE, the resend's connect is refused, and the
    outcome read `fail` although the cancel had applied (the 2026-11-30 finding). Sent once, `info`."""
    node = NodeKilledMidCancel()
    async with node as url, open_session(connection_limit=4) as session:
        client = NodeClient(session, url, "token")
        assert (await client.request("GET", "/api/v1/timers/q/warm")).type == OK
        outcome = await client.request("DELETE", "/api/v1/timers/q/k")
    assert node.runs == 1
    assert outcome.type == INFO, outcome
