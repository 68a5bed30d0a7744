"""The SDK's retry policy is the only retry: aiohttp's silent resend of an idempotent method never runs.

Against real local aiohttp servers that apply a request, then drop its kept-alive connection without
answering (and, for a killed node, stop listening). A handler run is counted per request that reached
it, so a hidden resend shows as one run more than the SDK's attempts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from queen_raft.client import ConnectionFailed, OutcomeUnknown, Queen, RetryPolicy

# One attempt only: every handler run beyond the first is aiohttp's own resend.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
# The SDK's own retries, with tiny waits.
FAST = RetryPolicy(max_attempts=6, initial_backoff_s=0.001, max_backoff_s=0.01, budget_s=5.0)


@dataclass
class Cluster:
    """What the nodes share: pending timers of queue `q`, KV versions of namespace `ns`, and every
    handler run as (node, method, path)."""

    pending_timers: set[str] = field(default_factory=set)
    kv_versions: dict[str, int] = field(default_factory=dict)
    runs: list[tuple[str, str, str]] = field(default_factory=list)
    # The client's port of each run: one port for several runs is one kept-alive connection.
    client_ports: list[int] = field(default_factory=list)

    def runs_of(self, method: str, path: str) -> int:
        return sum(1 for _, m, p in self.runs if (m, p) == (method, path))

    def apply(self, method: str, path: str) -> dict:
        parts = path.strip("/").split("/")  # api, v1, timers|kv, q|ns, key
        kind, key = parts[2], parts[4]
        if kind == "timers" and method == "GET":
            return {"found": key in self.pending_timers, "queue": "q", "timerKey": key}
        if kind == "timers" and method == "DELETE":
            if key in self.pending_timers:
                self.pending_timers.discard(key)
                return {"ok": True, "status": "cancelled", "queue": "q", "timerKey": key, "txn": "t"}
            return {"ok": False, "status": "absent", "queue": "q", "timerKey": key, "txn": None}
        if kind == "kv" and method == "PUT":
            self.kv_versions[key] = self.kv_versions.get(key, 0) + 1
            return {"found": True, "value": 1, "version": self.kv_versions[key]}
        if kind == "kv" and method == "DELETE":
            return {"found": self.kv_versions.pop(key, None) is not None}
        raise AssertionError(f"unexpected {method} {path}")


@dataclass
class DroppingNode:
    """A real aiohttp server over `cluster`. The request of the path in `drop_path` is applied, then
    its connection closed without an answer, the first time only; with `dies`, the node also stops
    listening then, so a new connect to it is refused (a node killed mid-request)."""

    name: str
    cluster: Cluster
    drop_path: str | None = None
    dies: bool = False
    dropped: bool = False
    runner: web.AppRunner | None = None
    listener: asyncio.Server | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.cluster.runs.append((self.name, request.method, request.path))
        self.cluster.client_ports.append(request.transport.get_extra_info("peername")[1])
        answer = self.cluster.apply(request.method, request.path)
        if request.path == self.drop_path and not self.dropped:
            self.dropped = True
            if self.dies:
                self.listener.close()
            request.transport.close()
        return web.json_response(answer)

    async def start(self) -> "DroppingNode":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        self.listener = await asyncio.get_running_loop().create_server(self.runner.server, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.sockets[0].getsockname()[1]}" if self.listener.sockets else ""

    async def close(self) -> None:
        self.listener.close()
        await self.runner.cleanup()


@pytest.fixture
async def cluster():
    cluster = Cluster(pending_timers={"k", "warm"}, kv_versions={"k": 1})
    nodes: list[DroppingNode] = []

    async def start(**options) -> DroppingNode:
        node = await DroppingNode(f"n{len(nodes) + 1}", cluster, **options).start()
        nodes.append(node)
        return node

    cluster.start = start
    yield cluster
    for node in nodes:
        await node.close()


TIMER = "/api/v1/timers/q/k"
KV = "/api/v1/kv/ns/k"
WARM_UP = "/api/v1/timers/q/warm"  # a peek, so the call under test goes out on a kept-alive connection

Call = Callable[[Queen], Awaitable[object]]
CALLS: dict[str, tuple[str, str, Call]] = {
    "timer cancel": ("DELETE", TIMER, lambda q: q.timer("q").key("k").cancel()),
    "timer peek": ("GET", TIMER, lambda q: q.timer("q").key("k").peek()),
    "kv put": ("PUT", KV, lambda q: q.kv("ns").put("k", 1)),
    "kv delete": ("DELETE", KV, lambda q: q.kv("ns").delete("k")),
}


async def test_installed_aiohttp_resends_a_dropped_idempotent_request_even_with_force_close(cluster):
    """Pins the aiohttp behaviour the SDK guards against. If an upgrade fails this, re-read
    aiohttp/client.py (`retry_persistent_connection`): the guard may have become unnecessary, or
    the resend may have moved where `no_silent_resend` no longer sees it (the tests below say)."""
    node = await cluster.start(drop_path=TIMER)
    for force_close in (False, True):
        cluster.pending_timers.add("k")
        node.dropped = False
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=force_close)) as session:
            async with session.get(node.url + WARM_UP) as warm:
                assert warm.status == 200
            before = cluster.runs_of("DELETE", TIMER)
            async with session.delete(node.url + TIMER) as response:
                answer = await response.json()
        # The first send cancelled the timer; the resend answered, and the caller sees only that.
        assert cluster.runs_of("DELETE", TIMER) - before == 2, force_close
        assert answer["status"] == "absent", force_close


@pytest.mark.parametrize("call", CALLS, ids=list(CALLS))
async def test_the_sdk_sends_a_dropped_request_once_and_says_it_may_have_been_applied(cluster, call):
    method, path, invoke = CALLS[call]
    node = await cluster.start(drop_path=path)
    async with Queen(urls=[node.url], retry=ONE_ATTEMPT) as q:
        await q.timer("q").key("warm").peek()
        with pytest.raises(ConnectionFailed) as raised:
            await invoke(q)
    assert cluster.runs_of(method, path) == 1
    assert raised.value.maybe_applied_before is True


async def test_a_cancel_applied_then_dropped_is_outcome_unknown_not_absent(cluster):
    node = await cluster.start(drop_path=TIMER)
    async with Queen(urls=[node.url], retry=FAST) as q:
        await q.timer("q").key("warm").peek()
        with pytest.raises(OutcomeUnknown):
            await q.timer("q").key("k").cancel()
    # The dropped send, then the SDK's own retry, which found nothing pending.
    assert cluster.runs_of("DELETE", TIMER) == 2 and "k" not in cluster.pending_timers


async def test_a_node_killed_after_applying_a_cancel_is_outcome_unknown_not_absent(cluster):
    """The finding in jepsen/findings/2026-11-30-timers-kill-s1-lost-reschedule: the resend's connect was refused and read as "nothing was sent"."""
    dying = await cluster.start(drop_path=TIMER, dies=True)
    survivor = await cluster.start()
    dying_url = dying.url
    async with Queen(urls=[dying_url, survivor.url], retry=FAST) as q:
        await q.timer("q").key("warm").peek()
        with pytest.raises(OutcomeUnknown):
            await q.timer("q").key("k").cancel()
    assert [node for node, method, _ in cluster.runs if method == "DELETE"] == ["n1", "n2"]


async def test_a_kv_delete_applied_then_dropped_is_outcome_unknown(cluster):
    node = await cluster.start(drop_path=KV)
    async with Queen(urls=[node.url], retry=FAST) as q:
        await q.timer("q").key("warm").peek()
        with pytest.raises(OutcomeUnknown):
            await q.kv("ns").delete("k")
    assert cluster.runs_of("DELETE", KV) == 2


async def test_a_cancel_answered_absent_without_an_ambiguous_attempt_stays_absent(cluster):
    node = await cluster.start()
    async with Queen(urls=[node.url], retry=FAST) as q:
        result = await q.timer("q").key("gone").cancel()
        assert (result.ok, result.status) == (False, "absent")
        assert (await q.kv("ns").delete("gone")).found is False


async def test_a_user_session_gets_the_guard_and_the_given_middlewares_run(cluster):
    """Documented in docs/sdk.md: the session's own middlewares are not run for the SDK's requests
    (the SDK's per-request list overrides them); those given to Queen(middlewares=...) are."""
    node = await cluster.start(drop_path=TIMER)
    seen_by_session: list[str] = []
    seen_by_client: list[str] = []

    def recorder(seen: list[str]):
        async def middleware(request: aiohttp.ClientRequest, handler):
            seen.append(request.method)
            return await handler(request)
        return middleware

    async with aiohttp.ClientSession(middlewares=(recorder(seen_by_session),)) as session:
        async with Queen(urls=[node.url], retry=ONE_ATTEMPT, session=session,
                         middlewares=[recorder(seen_by_client)]) as q:
            await q.timer("q").key("warm").peek()
            with pytest.raises(ConnectionFailed) as raised:
                await q.timer("q").key("k").cancel()
        assert not session.closed
    assert cluster.runs_of("DELETE", TIMER) == 1 and raised.value.maybe_applied_before is True
    assert seen_by_client == ["GET", "DELETE"] and seen_by_session == []


async def test_the_guard_keeps_connections_alive(cluster):
    node = await cluster.start()
    async with Queen(urls=[node.url], retry=FAST) as q:
        await q.timer("q").key("warm").peek()
        await q.kv("ns").put("k", 1)
        await q.timer("q").key("k").cancel()
    assert len(cluster.client_ports) == 3 and len(set(cluster.client_ports)) == 1
