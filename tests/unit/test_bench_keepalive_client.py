"""bench/keepalive_client.py against a real aiohttp server: the request QueenClient sends, answers
read by httptools on kept-alive connections, and QueenClient's retries."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.keepalive_client import KeepAliveScheduleClient, ProtocolMismatch
from bench.queen_service import CallFailed, QueenEndpoint
from bench.timer_service import PAYLOAD_B64, QUEUE, ScheduleOp


class FakeNode:
    """POST /api/v1/timers: records each call and the connection it came on, answers as told."""

    def __init__(self, answers=()):
        self.calls: list[dict] = []
        self.connections: set[int] = set()
        self.answers = list(answers)  # callables (request, body) -> response, used first, in order

    async def post_timers(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"auth": request.headers.get("Authorization"), "body": body})
        self.connections.add(id(request.transport))
        if self.answers:
            return await self.answers.pop(0)(request, body)
        results = [{"ok": True, "status": "scheduled", "timerKey": op["timerKey"], "deliverAt": 1000 + i}
                   for i, op in enumerate(body["operations"])]
        return web.json_response({"results": results})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/v1/timers", self.post_timers)
        return app


async def served(node: FakeNode) -> TestServer:
    server = TestServer(node.app(), host="127.0.0.1")
    await server.start_server()
    return server


def url_of(server: TestServer) -> str:
    return f"http://127.0.0.1:{server.port}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connecting is refused


async def test_sends_what_queen_client_sends_and_reads_the_answers_on_one_connection():
    node = FakeNode()
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((url_of(server),), "acme-rw"))
    try:
        ops = [ScheduleOp("k-1", 5000, "t-1"), ScheduleOp("k-2", 6000, "t-2")]
        assert await client.schedule(ops) == [1000, 1001]
        for n in range(5):
            assert await client.schedule([ScheduleOp(f"s-{n}", 7000, f"s-{n}")]) == [1000]
    finally:
        await client.close()
        await server.close()
    assert node.calls[0]["auth"] == "Bearer acme-rw"
    assert node.calls[0]["body"] == {"operations": [
        {"op": "schedule", "queue": QUEUE, "timerKey": "k-1", "delayMs": 5000, "txn": "t-1", "payload": PAYLOAD_B64},
        {"op": "schedule", "queue": QUEUE, "timerKey": "k-2", "delayMs": 6000, "txn": "t-2", "payload": PAYLOAD_B64}]}
    assert len(node.calls) == 6 and len(node.connections) == 1  # kept alive, sequential calls reuse it


async def test_calls_in_flight_together_each_get_their_own_answer():
    async def slow(request, body):
        await asyncio.sleep(0.01)
        return web.json_response({"results": [{"deliverAt": int(body["operations"][0]["delayMs"])}]})

    node = FakeNode([slow] * 8)
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((url_of(server),), "acme-rw"))
    try:
        answers = await asyncio.gather(*(client.schedule([ScheduleOp(f"k-{n}", n, f"t-{n}")]) for n in range(8)))
    finally:
        await client.close()
        await server.close()
    assert answers == [[n] for n in range(8)]
    assert len(node.connections) == 8


async def test_a_503_is_retried_on_the_same_node_and_other_statuses_are_errors():
    async def unavailable(request, body):
        return web.json_response({"error": "timers_unavailable", "reason": "no_leader"}, status=503)

    async def refused(request, body):
        return web.json_response({"error": "timers_bad_request", "message": "no"}, status=400)

    node = FakeNode([unavailable, unavailable, refused])
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((url_of(server),), "acme-rw"))
    try:
        await client.schedule([ScheduleOp("k", 1, "t")])
    except CallFailed as exc:
        assert "schedule answered 400" in str(exc)
    else:
        pytest.fail("the 400 after two 503s must fail the call")
    finally:
        await client.close()
        await server.close()
    assert client.retries == 2 and len(node.calls) == 3


async def test_an_unreachable_node_sends_the_call_to_the_next_url():
    node = FakeNode()
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((f"http://127.0.0.1:{closed_port()}", url_of(server)), "acme-rw"))
    try:
        assert await client.schedule([ScheduleOp("k", 1, "t")]) == [1000]
    finally:
        await client.close()
        await server.close()
    assert client.retries == 1 and len(node.calls) == 1


async def test_connection_close_is_honoured_and_the_next_call_opens_a_new_connection():
    async def closing(request, body):
        return web.json_response({"results": [{"deliverAt": 7}]}, headers={"Connection": "close"})

    node = FakeNode([closing])
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((url_of(server),), "acme-rw"))
    try:
        assert await client.schedule([ScheduleOp("k", 1, "t")]) == [7]
        assert await client.schedule([ScheduleOp("k", 1, "t")]) == [1000]
    finally:
        await client.close()
        await server.close()
    assert client.retries == 0 and len(node.connections) == 2


async def test_a_chunked_answer_is_read_whole():
    async def chunked(request, body):
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"results": [{"deliverAt"')
        await response.write(b': 1}]}')
        await response.write_eof()
        return response

    node = FakeNode([chunked])
    server = await served(node)
    client = KeepAliveScheduleClient(QueenEndpoint((url_of(server),), "acme-rw"))
    try:
        assert await client.schedule([ScheduleOp("k", 1, "t")]) == [1]
        assert await client.schedule([ScheduleOp("k", 1, "t")]) == [1000]  # and the connection goes on
    finally:
        await client.close()
        await server.close()
    assert len(node.connections) == 1


async def test_bytes_that_are_not_http_are_refused_not_guessed():
    from bench.keepalive_client import _Connection

    class Sink:
        def write(self, data):
            pass

        def close(self):
            pass

    connection = _Connection()
    connection.connection_made(Sink())
    pending = asyncio.ensure_future(connection.request(b"POST / HTTP/1.1\r\n\r\n", b"", 1.0))
    await asyncio.sleep(0)
    connection.data_received(b"SSH-2.0-OpenSSH_9.2\r\n")
    with pytest.raises(ProtocolMismatch):
        await asyncio.wait_for(pending, 1.0)


async def test_an_answer_arriving_in_pieces_is_read_once_whole():
    from bench.keepalive_client import _Connection

    class Sink:
        def __init__(self):
            self.written = b""

        def write(self, data):
            self.written += data

        def close(self):
            pass

    connection = _Connection()
    connection.connection_made(Sink())
    answer = b'{"results":[{"deliverAt":5}]}'
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCONTENT-LENGTH: %d\r\n\r\n%s" % (len(answer), answer)
    pending = asyncio.ensure_future(connection.request(b"POST / HTTP/1.1\r\n\r\n", b"", 1.0))
    await asyncio.sleep(0)
    for i in range(0, len(wire) - 1, 7):  # seven bytes at a time: the head's end and the body straddle pieces
        connection.data_received(wire[i:min(i + 7, len(wire) - 1)])
        await asyncio.sleep(0.001)
        assert not pending.done()
    connection.data_received(wire[-1:])
    assert await asyncio.wait_for(pending, 1.0) == (200, answer)
    assert connection.transport.written == b"POST / HTTP/1.1\r\n\r\n"
