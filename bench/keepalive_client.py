"""A lean schedule client for the closed-loop single-op phase: HTTP/1.1 keep-alive on asyncio.

The load generator runs on the same two cores as the three nodes it measures, so what it spends
per call is taken from them. QueenClient (aiohttp's ClientSession) costs 130-170 us of CPU per
single-op call (request and response objects, header multidicts, timers, a task per request; ~95 us
with every aiohttp client option set lean); this client writes one prebuilt request head plus an
orjson body on a kept-alive connection and reads the answer with httptools (the llhttp parser that
uvicorn uses): 35-40 us. The peers' benchmarks use their own native clients too (redis-py speaks
RESP, psycopg the PostgreSQL protocol). The SDK (queen_raft/client, on aiohttp) is what users call;
its cost is the client's, not the service's.

It sends the same request QueenClient.schedule sends (POST /api/v1/timers, the same body and bearer
token) and retries the same way (bench/queen_service.py): a 503 is retried on the same node after
RETRY_PAUSE_S, an unreachable node sends the call to the next URL; MAX_CALL_ATTEMPTS in all.
"""

from __future__ import annotations

import asyncio
import collections
from urllib.parse import urlsplit

import httptools
import orjson

from bench.queen_service import HTTP_TIMEOUT_S, MAX_CALL_ATTEMPTS, RETRY_PAUSE_S, CallFailed, QueenEndpoint
from bench.timer_service import PAYLOAD_B64, ScheduleOp

SCHEDULE_PATH = "/api/v1/timers"


class ProtocolMismatch(RuntimeError):
    """The bytes the node sent are not an HTTP/1.1 answer httptools can read."""


class _Connection(asyncio.Protocol):
    """One kept-alive connection carrying one request at a time; httptools parses the answers."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._answers: collections.deque[tuple[int, bytes, bool]] = collections.deque()
        self._answer: asyncio.Future | None = None
        self._broken: ProtocolMismatch | None = None

    # -- httptools callbacks ------------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        keep_alive = self._parser.should_keep_alive()
        self._answers.append((self._parser.get_status_code(), b"".join(self._body), not keep_alive))
        self._body = []

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        answer = self._answer
        if answer is not None and not answer.done():
            answer.set_exception(ConnectionResetError(f"the node closed the connection: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken = ProtocolMismatch(f"not an HTTP/1.1 answer: {exc}")
        self._deliver()

    def _deliver(self) -> None:
        answer = self._answer
        if answer is None or answer.done():
            return
        if self._broken is not None:
            answer.set_exception(self._broken)
        elif self._answers:
            answer.set_result(self._answers.popleft())

    async def request(self, head: bytes, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self._answer = answer = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        self._deliver()  # an answer already parsed (or bytes already refused) settles it at once
        try:
            status, answer_body, close = await asyncio.wait_for(answer, timeout_s)
        finally:
            self._answer = None
        if close:
            self.close()
        return status, answer_body

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class KeepAliveScheduleClient:
    """schedule(ops) as QueenClient.schedule, over idle kept-alive connections (one per call in flight)."""

    def __init__(self, endpoint: QueenEndpoint, timeout_s: float = HTTP_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.retries = 0
        self._timeout_s = timeout_s
        self._url_index = 0
        self._targets = [urlsplit(url) for url in endpoint.urls]
        self._heads = [self._head_prefix(target.netloc) for target in self._targets]
        self._idle: list[collections.deque[_Connection]] = [collections.deque() for _ in endpoint.urls]

    def _head_prefix(self, netloc: str) -> bytes:
        return (f"POST {SCHEDULE_PATH} HTTP/1.1\r\nHost: {netloc}\r\nAuthorization: Bearer {self.endpoint.token}\r\n"
                "Content-Type: application/json\r\nContent-Length: ").encode("latin-1")

    async def _connection(self, index: int) -> _Connection:
        idle = self._idle[index]
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        target = self._targets[index]
        _, connection = await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(_Connection, target.hostname, target.port), self._timeout_s)
        return connection

    async def _post(self, body: bytes) -> tuple[int, object]:
        last: object = None
        for _ in range(MAX_CALL_ATTEMPTS):
            index = self._url_index
            try:
                connection = await self._connection(index)
                try:
                    status, answer = await connection.request(
                        self._heads[index] + b"%d\r\n\r\n" % len(body), body, self._timeout_s)
                except BaseException:
                    connection.close()  # an answer may still come: this connection is done
                    raise
                if not connection.closed:
                    self._idle[index].append(connection)
            except (OSError, asyncio.TimeoutError) as exc:  # refused, reset, unreachable, no answer
                last = repr(exc)
                self.retries += 1
                self._url_index = (index + 1) % len(self._targets)
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            payload = orjson.loads(answer) if answer else None
            if status == 503:
                last = (status, payload)
                self.retries += 1
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            return status, payload
        raise CallFailed(f"POST {SCHEDULE_PATH}: no answer after {MAX_CALL_ATTEMPTS} attempts: {last}")

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        body = orjson.dumps({"operations": [
            {"op": "schedule", "queue": self.endpoint.queue, "timerKey": op.key, "delayMs": op.delay_ms,
             "txn": op.txn, "payload": PAYLOAD_B64} for op in ops]})
        status, answer = await self._post(body)
        if status != 200:
            raise CallFailed(f"schedule answered {status}: {answer}")
        return [result["deliverAt"] for result in answer["results"]]

    async def close(self) -> None:
        for idle in self._idle:
            while idle:
                idle.pop().close()
