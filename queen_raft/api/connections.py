"""A bound on open HTTP connections, and the reaping of idle and slow ones.

aiohttp keeps every accepted connection until its client leaves or its keep-alive timer fires, and
the asyncio server accepts as long as the kernel hands it sockets: enough idle or slow clients
exhaust the process's file descriptors, and then every accept, journal open and Raft dial fails.

`ConnectionLimiter` wraps each aiohttp protocol and keeps the node at `http_max_connections` open
connections, plus at most two listen backlogs in transit (asyncio accepts up to a backlog of
sockets per loop iteration and makes their protocols in the next, where each closes the
longest-idle connection, whose descriptor is released one iteration later):
- a connection is *busy* while a route handles one of its requests, else *idle* (waiting for a
  request, part-way through a request head, or kept alive between requests);
- a new connection at the bound closes the longest-idle connection, as nginx does with its
  keep-alive connections when it runs out: a live client reconnects, a hoarder loses its socket;
- when every connection is busy, the new one is answered 503 `busy` (Retry-After: 1) and closed:
  requests in progress are never cut to make room;
- a request head that has not fully arrived `http_header_timeout_s` after its first byte closes
  the connection (a slowloris sends one header line at a time, never finishing); aiohttp's own
  keep-alive timer (`http_keepalive_timeout_s`) closes one that sends nothing at all.
Each closing is counted in the client error log, not logged one by one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import ssl
from collections import OrderedDict
from typing import Any, Callable

from aiohttp import web

from queen_raft.api.client_errors import ClientErrorLog

log = logging.getLogger(__name__)

# How often idle connections are checked for an overdue request head.
HEADER_SWEEP_S = 1.0
LISTEN_BACKLOG = 256
# File descriptors the node needs besides HTTP connections: per tenant its Raft listener, peer
# connections both ways, journal and snapshot files; plus the loop, logs and imports.
FD_RESERVE_BASE = 128
FD_RESERVE_PER_TENANT = 16

_BUSY_BODY = json.dumps({"error": "unavailable", "reason": "busy",
                         "message": "the node is at its connection limit with every connection busy; retry"}).encode()
BUSY_ANSWER = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
               b"Connection: close\r\nContent-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


class LimitedConnection(asyncio.Protocol):
    """The transport's protocol: passes everything to aiohttp's handler once admitted."""

    def __init__(self, limiter: "ConnectionLimiter", make_handler: Callable[[], Any]):
        self.limiter = limiter
        self.make_handler = make_handler
        self.handler: Any = None
        self.transport: asyncio.Transport | None = None
        self.head_started_at: float | None = None  # loop time of a request head's first byte

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.limiter.admit(self):
            transport.write(BUSY_ANSWER)  # type: ignore[attr-defined]
            transport.close()
            return
        self.handler = self.make_handler()
        self.limiter.by_handler[self.handler] = self
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.handler is None:
            return
        if self.head_started_at is None and self in self.limiter.idle:
            self.head_started_at = self.limiter.now()
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.handler is None else self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.limiter.forget(self)
        if self.handler is not None:
            self.limiter.by_handler.pop(self.handler, None)
            self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def close(self) -> None:
        if self.handler is not None:
            self.handler.force_close()
        elif self.transport is not None:
            self.transport.close()


class ConnectionLimiter:
    def __init__(self, max_connections: int, header_timeout_s: float, errors: ClientErrorLog):
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        self.errors = errors
        self.idle: OrderedDict[LimitedConnection, None] = OrderedDict()  # longest idle first
        self.busy: set[LimitedConnection] = set()
        self.by_handler: dict[Any, LimitedConnection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep: asyncio.TimerHandle | None = None

    @property
    def open_count(self) -> int:
        return len(self.idle) + len(self.busy)

    def now(self) -> float:
        return self._loop.time() if self._loop is not None else 0.0

    def protocol_factory(self, make_handler: Callable[[], Any]) -> Callable[[], LimitedConnection]:
        return lambda: LimitedConnection(self, make_handler)

    def admit(self, conn: LimitedConnection) -> bool:
        if self.open_count >= self.max_connections:
            if not self.idle:
                self.errors.note("connection refused at the connection limit (all busy)")
                return False
            oldest, _ = self.idle.popitem(last=False)
            self.errors.note("idle connection closed at the connection limit")
            oldest.close()
        self.idle[conn] = None
        return True

    def forget(self, conn: LimitedConnection) -> None:
        self.idle.pop(conn, None)
        self.busy.discard(conn)

    def begin(self, conn: LimitedConnection) -> None:
        """The connection is busy: a route handles one of its requests (the app's middleware)."""
        if self.idle.pop(conn, False) is None:
            self.busy.add(conn)
        conn.head_started_at = None

    def end(self, conn: LimitedConnection) -> None:
        if conn in self.busy:
            self.busy.discard(conn)
            self.idle[conn] = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._sweep = loop.call_later(HEADER_SWEEP_S, self.close_slow_heads)

    def stop(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def close_slow_heads(self) -> None:
        deadline = self.now() - self.header_timeout_s
        slow = [c for c in self.idle if c.head_started_at is not None and c.head_started_at <= deadline]
        for conn in slow:
            self.idle.pop(conn, None)
            self.errors.note("connection closed: request head not complete in time")
            conn.close()
        if self._loop is not None:
            self._sweep = self._loop.call_later(HEADER_SWEEP_S, self.close_slow_heads)


class LimitedSite(web.BaseSite):
    """A TCP site whose connections pass through a ConnectionLimiter."""

    def __init__(self, runner: web.BaseRunner, limiter: ConnectionLimiter, host: str, port: int,
                 shutdown_timeout: float = 60.0, backlog: int = LISTEN_BACKLOG,
                 ssl_context: ssl.SSLContext | None = None):
        super().__init__(runner, shutdown_timeout=shutdown_timeout, ssl_context=ssl_context, backlog=backlog)
        self._limiter = limiter
        self._host = host
        self._port = port

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return self._server.sockets[0].getsockname()[1]
        return self._port

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._limiter.start(loop)
        self._server = await loop.create_server(
            self._limiter.protocol_factory(self._runner.server), self._host, self._port,
            backlog=self._backlog, reuse_address=True, ssl=self._ssl_context,
            # A TLS handshake is part of a request head: it gets the head's time, not asyncio's 60 s.
            ssl_handshake_timeout=self._limiter.header_timeout_s if self._ssl_context else None)

    async def stop(self) -> None:
        self._limiter.stop()
        await super().stop()


def fit_connection_limit(wanted: int, tenants: int) -> int:
    """The connection bound this process can hold: raises the soft open-file limit towards the hard
    one as far as `wanted` needs, and lowers the bound (logged) when the hard limit is too low."""
    reserve = FD_RESERVE_BASE + FD_RESERVE_PER_TENANT * tenants + 2 * LISTEN_BACKLOG
    needed = wanted + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit to %d: %s", target, exc)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    fitted = max(16, soft - reserve)
    log.warning("http_max_connections=%d does not fit the open-file limit %d (reserve %d); serving at most %d "
                "connections: raise the limit (ulimit -n, LimitNOFILE) to keep the setting", wanted, soft, reserve, fitted)
    return fitted
