"""Retries and failover of the SDK's transport, against local aiohttp servers that answer from a script."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from queen_raft.client import (AckRefused, BadRequest, ConnectionFailed, OutcomeUnknown, Queen, RateLimited, RetryPolicy,
                               TimersDisabled, Unavailable)

# Tests that must not wait for real backoffs use this: tiny waits, same bounds otherwise.
FAST = RetryPolicy(max_attempts=6, initial_backoff_s=0.001, max_backoff_s=0.01, budget_s=5.0)


@dataclass
class Seen:
    method: str
    raw_path: str
    query: dict
    body: Any
    headers: dict


@dataclass
class ScriptedNode:
    """An HTTP server that records every request and answers each with the next scripted reply
    (status, body, headers); the last reply repeats. `reply` may instead compute one per request."""

    replies: list[tuple[int, Any, dict]] = field(default_factory=list)
    reply: Callable[[Seen], tuple[int, Any, dict]] | None = None
    seen: list[Seen] = field(default_factory=list)
    server: TestServer | None = None

    async def handle(self, request: web.Request) -> web.Response:
        text = await request.text()
        seen = Seen(request.method, request.raw_path, dict(request.query), json.loads(text) if text else None,
                    dict(request.headers))
        self.seen.append(seen)
        if self.reply is not None:
            status, body, headers = self.reply(seen)
        else:
            status, body, headers = self.replies[min(len(self.seen), len(self.replies)) - 1]
        if status == 204:
            return web.Response(status=204, headers=headers)
        return web.json_response(body, status=status, headers=headers)

    async def start(self) -> "ScriptedNode":
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def close(self) -> None:
        await self.server.close()


def refused_url() -> str:
    """A loopback port nobody listens on: bound, then closed, so a connect is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


UNAVAILABLE = (503, {"error": "timers_unavailable", "message": "no leader"}, {"Retry-After": "1"})
SCHEDULED = (200, {"results": [{"ok": True, "status": "scheduled", "queue": "q", "timerKey": "k", "txn": "t",
                                "messageId": "m", "deliverAt": 1}]}, {})


@pytest.fixture
async def nodes():
    started: list[ScriptedNode] = []

    async def start(**kwargs) -> ScriptedNode:
        node = await ScriptedNode(**kwargs).start()
        started.append(node)
        return node

    yield start
    for node in started:
        await node.close()


async def test_503_then_200_waits_the_retry_after_and_sends_the_same_txn(nodes):
    node = await nodes(replies=[UNAVAILABLE, SCHEDULED])
    async with Queen(urls=[node.url], token="tok") as q:
        started = time.monotonic()
        result = await q.timer("q").key("k").delay("1m").payload({"a": 1}).schedule()
        elapsed = time.monotonic() - started
    assert result.status == "scheduled"
    assert len(node.seen) == 2
    assert elapsed >= 1.0, "Retry-After: 1 was not honoured"
    first, second = (s.body["operations"][0] for s in node.seen)
    assert first == second  # the minted txn is the same on the retry: the retry is idempotent
    assert node.seen[0].headers["Authorization"] == "Bearer tok"


async def test_503_fails_over_to_the_next_node_at_once(nodes):
    down = await nodes(replies=[UNAVAILABLE])
    up = await nodes(replies=[SCHEDULED])
    async with Queen(urls=[down.url, up.url], retry=FAST) as q:
        started = time.monotonic()
        await q.timer("q").key("k").delay(0).payload(b"x").schedule()
        assert time.monotonic() - started < 1.0  # the other node is not held to the first one's Retry-After
        assert q.transport.current_url == up.url
        await q.timer("q").key("k").delay(0).payload(b"x").schedule()
    assert (len(down.seen), len(up.seen)) == (1, 2)  # it stays on the node that answered


async def test_refused_connection_fails_over_and_the_answering_node_sticks(nodes):
    up = await nodes(replies=[SCHEDULED])
    async with Queen(urls=[refused_url(), up.url], retry=FAST) as q:
        for _ in range(3):
            assert (await q.timer("q").key("k").delay("1s").payload(None).schedule()).ok
    assert len(up.seen) == 3


async def test_no_node_answering_is_connection_failed_after_the_bounded_attempts():
    policy = RetryPolicy(max_attempts=4, initial_backoff_s=0.001, max_backoff_s=0.002, budget_s=5.0)
    async with Queen(urls=[refused_url(), refused_url()], retry=policy) as q:
        with pytest.raises(ConnectionFailed) as caught:
            await q.timer("q").key("k").peek()
    assert caught.value.status == 0


async def test_503_forever_raises_unavailable_within_the_budget(nodes):
    node = await nodes(replies=[(503, {"error": "unavailable", "message": "no leader"}, {})])
    policy = RetryPolicy(max_attempts=50, initial_backoff_s=0.01, max_backoff_s=0.05, budget_s=0.5)
    async with Queen(urls=[node.url], retry=policy) as q:
        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            await q.kv("ns").get("k")
        assert time.monotonic() - started < 1.5
    assert caught.value.code == "unavailable"
    assert 2 <= len(node.seen) < 50  # retried, and stopped by the budget, not the attempt count


async def test_a_retry_after_beyond_the_budget_ends_the_retries_at_once(nodes):
    paused = (503, {"error": "timers_disabled", "message": "paused"},
              {"Retry-After": "30", "x-queen-timers-hint": "DELETE /api/v1/timers/q/k"})
    node = await nodes(replies=[paused])
    async with Queen(urls=[node.url], retry=RetryPolicy(budget_s=5.0)) as q:
        started = time.monotonic()
        with pytest.raises(TimersDisabled) as caught:
            await q.timer("q").key("k").delay("1s").payload(1).schedule()
        assert time.monotonic() - started < 1.0
    assert len(node.seen) == 1
    assert caught.value.retry_after_s == 30
    assert caught.value.hint == "DELETE /api/v1/timers/q/k"


@pytest.mark.parametrize("status, code, error_type", [
    (400, "timers_bad_request", BadRequest),
    (429, "rate_limited", RateLimited),
])
async def test_client_errors_are_not_retried_and_are_typed(nodes, status, code, error_type):
    node = await nodes(replies=[(status, {"error": code, "message": "no"}, {"Retry-After": "2"})])
    async with Queen(urls=[node.url], retry=FAST) as q:
        with pytest.raises(error_type) as caught:
            await q.timer("q").key("k").delay("1s").payload(1).schedule()
    assert len(node.seen) == 1
    assert (caught.value.status, caught.value.code, caught.value.message) == (status, code, "no")
    assert caught.value.wire_body() == {"error": code, "message": "no"}


async def test_an_incr_is_not_retried_after_a_503(nodes):
    node = await nodes(replies=[(503, {"error": "unavailable", "message": "commit timeout"}, {"Retry-After": "1"}),
                                (200, {"results": [{"ns": "n", "key": "k", "found": True, "value": 2, "version": 2}]}, {})])
    async with Queen(urls=[node.url], retry=FAST) as q:
        with pytest.raises(Unavailable):
            await q.kv("n").incr("k")
    assert len(node.seen) == 1


async def test_an_ack_refused_after_an_ambiguous_retry_is_outcome_unknown(nodes):
    popped = (200, {"leaseId": "L", "messages": [{"transactionId": "t", "messageId": "m", "partition": "Default",
                                                  "offset": 0, "leaseId": "L", "deliveryAttempt": 1,
                                                  "payload": {"a": 1}, "createdAt": 5, "consumerGroup": "g"}]}, {})
    script = iter([popped, (503, {"error": "unavailable", "message": "leader changed"}, {}),
                   (200, {"results": [{"index": 0, "success": False, "error": "invalid_lease", "dlq": False}]}, {})])
    node = await nodes(reply=lambda seen: next(script))
    async with Queen(urls=[node.url], retry=FAST) as q:
        [message] = await q.pop("jobs", group="g")
        assert (message.payload, message.lease_id, message.offset) == ({"a": 1}, "L", 0)
        with pytest.raises(OutcomeUnknown) as caught:
            await message.ack()
    assert caught.value.code == "invalid_lease"
    ack_bodies = [s.body for s in node.seen[1:]]
    assert ack_bodies[0] == ack_bodies[1] == {
        "leaseId": "L", "consumerGroup": "g",
        "acknowledgments": [{"queue": "jobs", "partition": "Default", "transactionId": "t", "status": "completed"}]}


async def test_a_retried_ack_the_server_remembers_as_settled_otherwise_is_a_plain_refusal(nodes):
    popped = (200, {"leaseId": "L", "messages": [{"transactionId": "t", "messageId": "m", "partition": "Default",
                                                  "offset": 0, "leaseId": "L", "deliveryAttempt": 1,
                                                  "payload": {"a": 1}, "createdAt": 5, "consumerGroup": "g"}]}, {})
    script = iter([popped, (503, {"error": "unavailable", "message": "leader changed"}, {}),
                   (200, {"results": [{"index": 0, "success": False, "error": "invalid_lease",
                                       "message": "already settled as failed", "dlq": False}]}, {})])
    node = await nodes(reply=lambda seen: next(script))
    async with Queen(urls=[node.url], retry=FAST) as q:
        [message] = await q.pop("jobs", group="g")
        with pytest.raises(AckRefused) as caught:
            await message.ack()
    assert not isinstance(caught.value, OutcomeUnknown)
    assert "already settled as failed" in str(caught.value)


def test_backoff_doubles_and_is_bounded():
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0, jitter=0.5)
    assert [policy.backoff_s(n, rng=lambda: 0.0) for n in (1, 2, 3, 4, 5, 9)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.backoff_s(3, rng=lambda: 1.0) == pytest.approx(0.2)  # jitter takes at most half off


async def test_put_if_absent_refused_after_an_ambiguous_retry_is_outcome_unknown(nodes):
    node = await nodes(replies=[(503, {"error": "unavailable", "message": "commit timeout"}, {}),
                                (409, {"error": "kv_precondition", "message": "live key", "index": 0}, {})])
    async with Queen(urls=[node.url], retry=FAST) as q:
        with pytest.raises(OutcomeUnknown):
            await q.kv("n").put_if_absent("k", 1)
    assert len(node.seen) == 2


async def test_a_retry_after_holds_back_only_its_own_call(nodes):
    """A 30 s pause of scheduling answers for POST /api/v1/timers, not for the cancel that follows."""
    paused = (503, {"error": "timers_disabled", "message": "paused"}, {"Retry-After": "30"})
    cancelled = (200, {"ok": True, "status": "cancelled", "queue": "q", "timerKey": "k", "txn": "t"}, {})

    def reply(seen):
        return paused if seen.method == "POST" else cancelled

    both = [await nodes(reply=reply) for _ in range(2)]
    async with Queen(urls=[n.url for n in both], retry=RetryPolicy(budget_s=5.0)) as q:
        with pytest.raises(TimersDisabled):
            await q.timer("q").key("k").delay("1s").payload(1).schedule()
        started = time.monotonic()
        assert (await q.timer("q").key("k").cancel()).status == "cancelled"
        assert time.monotonic() - started < 1.0


async def test_clients_refused_together_do_not_all_return_at_the_retry_after_instant(nodes):
    # An election refuses every client at once with Retry-After: 1. Waiting exactly that long, they
    # would all come back in the same few milliseconds; the wait is the Retry-After at least, spread.
    clients = 20
    refused_at: dict[str, float] = {}
    retried_after: list[float] = []

    def reply(seen: Seen) -> tuple[int, Any, dict]:
        call = json.dumps(seen.body, sort_keys=True)  # each client's schedule carries its own txn
        if call not in refused_at:
            refused_at[call] = time.monotonic()
            return UNAVAILABLE
        retried_after.append(time.monotonic() - refused_at[call])
        return SCHEDULED

    node = await nodes(reply=reply)

    async def one_client() -> None:
        async with Queen(urls=[node.url]) as q:
            await q.timer("q").key("k").delay(0).payload(b"x").schedule()

    await asyncio.gather(*(one_client() for _ in range(clients)))
    assert len(retried_after) == clients
    assert min(retried_after) >= 0.99, "a client came back before its Retry-After"
    spread = max(retried_after) - min(retried_after)
    assert spread >= 0.1, f"all {clients} clients came back within {spread:.3f} s of their Retry-After"
