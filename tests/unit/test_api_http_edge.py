"""Hostile input at the HTTP edge: compressed bodies, clients that leave mid-body, malformed
request floods. An in-process app over FakeGroups (test_api_fake_group.ApiHarness) or behind the
node's own connection-limited site."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
import zlib

import pytest
import zstandard

from aiohttp import web

from queen_raft.api.app import CLIENT_ERRORS_KEY, CONNECTIONS_KEY, create_app
from queen_raft.api.connections import LimitedSite

from test_api_fake_group import ApiHarness, make_serving

TIMERS = "/api/v1/timers"
SCHEDULE = {"operations": [{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "txn": "t1",
                            "payload": "aGk="}]}
DEADLINE_S = 10.0


def gzip_bomb(decompressed_mib: int) -> bytes:
    """A gzip stream of zeros: about 1 KB per MiB it inflates to."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    return b"".join([compressor.compress(zeros) for _ in range(decompressed_mib)] + [compressor.flush()])


async def raw_exchange(port: int, head: bytes, body: bytes = b"", then: bytes = b"") -> list[bytes]:
    """Sends head + body (+ a second request `then`) on one connection; the status lines read back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body + then)
        await writer.drain()
        statuses = []
        for _ in range(2 if then else 1):
            status = await asyncio.wait_for(reader.readline(), DEADLINE_S)
            statuses.append(status.strip())
            length = 0
            while (line := await asyncio.wait_for(reader.readline(), DEADLINE_S)) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
        return statuses
    finally:
        writer.close()


def post_head(path: str, length: int, token: str | None = None, encoding: str | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: node", "Content-Type: application/json", f"Content-Length: {length}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if encoding:
        lines.append(f"Content-Encoding: {encoding}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


HEALTH = b"GET /health HTTP/1.1\r\nHost: node\r\n\r\n"


async def call_encoded(api: ApiHarness, body: bytes, encoding: str, token: str = "acme-rw"):
    response = await api.client.post(TIMERS, data=body, headers={
        "Authorization": f"Bearer {token}", "Content-Encoding": encoding, "Content-Type": "application/json"})
    return response.status, await response.json(content_type=None)


class NodeSite:
    """The app served as the node serves it (api/connections.py's site, aiohttp's defaults
    otherwise: a handler is not cancelled when its client leaves)."""

    def __init__(self, env: dict[str, str] | None = None):
        self.app = create_app(make_serving(env)[0])
        self.runner = web.AppRunner(self.app, access_log=None)
        self.errors = self.app[CLIENT_ERRORS_KEY]
        self.connections = self.app[CONNECTIONS_KEY]

    async def __aenter__(self) -> "NodeSite":
        await self.runner.setup()
        self.site = LimitedSite(self.runner, self.connections, "127.0.0.1", 0)
        await self.site.start()
        self.port = self.site.port
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


# --- Content-Encoding ---------------------------------------------------------------------------

@pytest.mark.parametrize("encoding, body", [
    ("gzip", b"\x1f\x8b\x08\x00garbage that is not deflate data" * 4),
    ("gzip", gzip.compress(b'{"operations": []}', mtime=0)[:-9]),  # cut short; mtime 0: one test id in every worker
    ("deflate", b"\x78\x9c not zlib"),
    ("zstd", b"\x28\xb5\x2f\xfd not zstd"),
])
async def test_a_body_that_does_not_decode_is_the_routes_400(encoding, body):
    async with ApiHarness() as api:
        status, answer = await call_encoded(api, body, encoding)
        assert (status, answer["error"]) == (400, "timers_bad_request"), answer
        assert "does not decode" in answer["message"]


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", gzip.compress), ("x-gzip", gzip.compress), ("deflate", zlib.compress),
    ("deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # raw deflate, as some clients send
    ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
])
async def test_a_compressed_body_is_read(encoding, compress):
    async with ApiHarness() as api:
        status, answer = await call_encoded(api, compress(json.dumps(SCHEDULE).encode()), encoding)
        assert status == 200, answer
        assert answer["results"][0]["status"] == "scheduled"


async def test_an_unknown_content_encoding_is_415():
    async with ApiHarness() as api:
        status, answer = await call_encoded(api, b"{}", "br")
        assert (status, answer["error"]) == (415, "unsupported_encoding")


async def test_a_body_that_inflates_past_the_ceiling_is_413_without_inflating_it_all():
    bomb = gzip_bomb(1024)  # 1 MiB sent, 1 GiB inflated
    async with ApiHarness(env={"QUEEN_HTTP_MAX_BODY_BYTES": str(1 << 20)}) as api:
        cpu_before = time.process_time()
        status, answer = await call_encoded(api, bomb, "gzip")
        cpu_s = time.process_time() - cpu_before
    assert (status, answer["error"]) == (413, "payload_too_large"), answer
    assert "decompressed" in answer["message"]
    assert cpu_s < 0.5, f"{cpu_s:.2f} s of CPU for a 413 after 1 MiB of output"


async def test_an_unauthenticated_bomb_is_401_at_once_and_never_inflated():
    """The 401 comes before the body is read; the unread body is then drained as sent (raw), not
    inflated: the next request on the connection is answered without a second of inflating first."""
    bomb = gzip_bomb(1024)
    async with ApiHarness() as api:
        started, cpu_before = time.monotonic(), time.process_time()
        statuses = await raw_exchange(api.client.port, post_head(TIMERS, len(bomb), encoding="gzip"), bomb, then=HEALTH)
        wall_s, cpu_s = time.monotonic() - started, time.process_time() - cpu_before
    assert statuses[0].startswith(b"HTTP/1.1 401"), statuses
    assert wall_s < 2.0 and cpu_s < 0.5, f"{wall_s:.2f} s, {cpu_s:.2f} s of CPU for a 401"


BODY_ROUTES = [("POST", TIMERS), ("POST", "/api/v1/push"), ("POST", "/api/v1/ack"), ("POST", "/api/v1/ack/batch"),
               ("POST", "/api/v1/fetch"), ("POST", "/api/v1/kv"), ("PUT", "/api/v1/kv/ns/key"),
               ("POST", "/api/v1/transaction"), ("POST", "/api/v1/lease/l-1/extend"), ("POST", "/api/v1/configure")]


@pytest.mark.parametrize("method, path", BODY_ROUTES)
async def test_every_body_route_refuses_an_unknown_token_before_its_body_arrives(method, path):
    """The body is announced and never sent: only a route that refuses before reading it answers."""
    async with ApiHarness() as api:
        head = post_head(path, 5_000_000, token="not-a-token").replace(b"POST", method.encode(), 1)
        statuses = await raw_exchange(api.client.port, head)
    assert statuses[0].startswith(b"HTTP/1.1 401"), (path, statuses)


# --- the log under client mistakes --------------------------------------------------------------

def tracebacks(caplog) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.exc_info]


async def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("leave", ["reset", "close"])
async def test_a_client_gone_mid_body_is_counted_not_logged_with_a_traceback(caplog, leave):
    caplog.set_level(logging.DEBUG)
    async with NodeSite() as node:
        errors = node.errors
        _, writer = await asyncio.open_connection("127.0.0.1", node.port)
        writer.write(post_head(TIMERS, 1000, token="acme-rw") + b'{"operations"')
        await writer.drain()
        await asyncio.sleep(0.05)  # the route is reading the body now
        if leave == "reset":
            writer.transport.abort()
        else:
            writer.close()
        await wait_for(lambda: errors.totals or tracebacks(caplog), "the server to notice the client left")
    assert not tracebacks(caplog), tracebacks(caplog)
    assert errors.totals["client disconnected mid-request"] == 1


async def test_a_flood_of_malformed_requests_logs_one_line_not_a_traceback_each(caplog):
    caplog.set_level(logging.DEBUG)
    malformed = b"GET /health HTTP/1.1\r\nHost: node\r\nContent-Length: twelve\r\n\r\n"
    async with NodeSite() as node:
        errors = node.errors
        for _ in range(200):
            statuses = await raw_exchange(node.port, malformed)
            assert b" 400 " in statuses[0], statuses
    assert not tracebacks(caplog), tracebacks(caplog)[:3]
    summaries = [r for r in caplog.records if r.name == "queen_raft.api.client_errors"]
    assert len(summaries) <= 2, [r.getMessage() for r in summaries]
    assert errors.totals["malformed request"] == 200


# --- the connection bound and the timeouts (api/connections.py) ---------------------------------

LIMITS = {"QUEEN_HTTP_MAX_CONNECTIONS": "16", "QUEEN_HTTP_HEADER_TIMEOUT_S": "0.3"}


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), DEADLINE_S) is not None
    except ConnectionError:
        return True


async def test_at_the_bound_a_new_connection_closes_the_longest_idle_one():
    async with NodeSite(LIMITS) as node:
        idle = [await asyncio.open_connection("127.0.0.1", node.port) for _ in range(16)]
        await wait_for(lambda: node.connections.open_count == 16, "16 open connections")
        statuses = await raw_exchange(node.port, HEALTH)
        assert statuses[0].startswith(b"HTTP/1.1 200"), statuses
        assert await closed_by_server(idle[0][0])  # the first opened, idle longest
        assert node.connections.open_count <= 16
        assert node.errors.totals["idle connection closed at the connection limit"] >= 1
        for _, writer in idle:
            writer.close()


async def test_at_the_bound_with_every_connection_busy_a_new_one_is_503_busy():
    async with NodeSite(LIMITS) as node:
        busy = []
        for _ in range(16):  # each one's route waits for the rest of its body
            reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
            writer.write(post_head(TIMERS, 100, token="acme-rw") + b'{"operations"')
            busy.append((reader, writer))
        await wait_for(lambda: len(node.connections.busy) == 16, "16 busy connections")
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        answer = await asyncio.wait_for(reader.read(), DEADLINE_S)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head, answer
        assert json.loads(body)["reason"] == "busy"
        for _, w in busy + [(reader, writer)]:
            w.close()


async def test_a_request_head_that_never_completes_is_closed():
    async with NodeSite(LIMITS) as node:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: node\r\n")  # and never the blank line
        started = time.monotonic()
        assert await closed_by_server(reader)
        assert time.monotonic() - started < 3.0
        assert node.errors.totals["connection closed: request head not complete in time"] == 1
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed():
    async with NodeSite({"QUEEN_HTTP_KEEPALIVE_TIMEOUT_S": "0.5"}) as node:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        writer.write(HEALTH)
        started = time.monotonic()
        assert await closed_by_server(reader)
        assert time.monotonic() - started < 3.0
        writer.close()


def test_the_connection_bound_raises_the_open_file_limit_or_is_lowered_to_fit_it(monkeypatch, caplog):
    from queen_raft.api import connections

    limits = {"soft": 1024, "hard": 100_000}
    monkeypatch.setattr(connections.resource, "getrlimit", lambda _: (limits["soft"], limits["hard"]))
    monkeypatch.setattr(connections.resource, "setrlimit", lambda _, pair: limits.update(soft=pair[0]))
    reserve = connections.FD_RESERVE_BASE + 2 * connections.FD_RESERVE_PER_TENANT + 2 * connections.LISTEN_BACKLOG
    assert connections.fit_connection_limit(4096, tenants=2) == 4096
    assert limits["soft"] == 4096 + reserve
    limits.update(soft=1024, hard=1024)
    assert connections.fit_connection_limit(4096, tenants=2) == 1024 - reserve > 256
    assert "does not fit the open-file limit" in caplog.text


def test_out_of_descriptor_tracebacks_of_the_tick_thread_and_the_loop_are_counted(caplog):
    import errno

    from queen_raft.api.client_errors import ClientErrorLog, CountResourceErrors, loop_exception_handler

    caplog.set_level(logging.DEBUG)
    errors = ClientErrorLog(logging.getLogger("test.client_errors"))
    tick_log = logging.getLogger("test.pysyncobj")
    tick_log.addFilter(CountResourceErrors(errors))
    emfile = OSError(errno.EMFILE, "Too many open files")
    for _ in range(50):
        try:
            raise emfile
        except OSError:
            tick_log.exception("failed _onTick in _autoTickThread")
    handler = loop_exception_handler(errors)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(50):
            handler(loop, {"message": "socket.accept() out of system resource", "exception": emfile})
    finally:
        loop.close()
    assert errors.totals["out of resources (EMFILE)"] == 100
    assert not tracebacks(caplog)
    assert len([r for r in caplog.records if r.name == "test.client_errors"]) == 1
