"""A lean schedule client for the closed-loop single-op phase: raw HTTP/1.1 keep-alive on asyncio.

The load generator runs on the same two cores as the three nodes it measures, so what it spends
per call is taken from them. QueenClient (aiohttp's ClientSession) costs 130-170 us of CPU per
single-op call (request and response objects, header multidicts, stdlib json, a task per request);
this client writes one prebuilt request head plus an orjson body on a kept-alive connection and
reads the answer back by Content-Length: the peers' benchmarks use their own native clients too.

It sends the same request QueenClient.schedule sends (POST /api/v1/timers, the same body and bearer
token) and retries the same way (bench/queen_service.py): a 503 is retried on the same node after
RETRY_PAUSE_S, an unreachable node sends the call to the next URL; MAX_CALL_ATTEMPTS in all.
Only what the node answers is understood: a response with a Content-Length (aiohttp's web.Response
always sends one); anything else is an error, never a guess.
"""

from __future__ import annotations

import asyncio
import collections
from urllib.parse import urlsplit

import orjson

from bench.queen_service import HTTP_TIMEOUT_S, MAX_CALL_ATTEMPTS, RETRY_PAUSE_S, CallFailed, QueenEndpoint
from bench.timer_service import PAYLOAD_B64, ScheduleOp

SCHEDULE_PATH = "/api/v1/timers"
# The longest response head (status line and headers) accepted before the answer is refused as
# not the node's: the node's heads are ~200 bytes.
MAX_HEAD_BYTES = 16 * 1024
_HEAD_END = b"\r\n\r\n"


class ProtocolMismatch(RuntimeError):
    """The answer is not one this client reads (no Content-Length, a head past MAX_HEAD_BYTES)."""


class _Connection(asyncio.Protocol):
    """One kept-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._answer: asyncio.Future | None = None
        self._head: tuple[int, int, bool] | None = None  # (status, content length, close after)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        answer = self._answer
        if answer is not None and not answer.done():
            answer.set_exception(ConnectionResetError(f"the node closed the connection: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._deliver()

    def _deliver(self) -> None:
        answer = self._answer
        if answer is None or answer.done():
            return
        try:
            parsed = self._parse()
        except ProtocolMismatch as exc:
            answer.set_exception(exc)
            return
        if parsed is not None:
            answer.set_result(parsed)

    def _parse(self) -> tuple[int, bytes, bool] | None:
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(_HEAD_END)
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolMismatch(f"no end of the response head in {len(buffer)} bytes")
                return None
            lines = bytes(buffer[:end]).split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            length = None
            close = False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            if length is None:
                raise ProtocolMismatch(f"a {status} answer without Content-Length")
            del buffer[:end + len(_HEAD_END)]
            self._head = (status, length, close)
        status, length, close = self._head
        if len(buffer) < length:
            return None
        body = bytes(buffer[:length])
        del buffer[:length]
        self._head = None
        return status, body, close

    async def request(self, head: bytes, body: bytes, timeout_s: float) -> tuple[int, bytes]:
        self._answer = answer = asyncio.get_running_loop().create_future()
        self.transport.write(head + body)
        if self._buffer:  # bytes the node sent unasked: read as the answer, or refused as garbage
            self._deliver()
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
