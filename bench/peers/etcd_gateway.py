"""etcd's v3 API through its HTTP/JSON gateway (grpc-gateway, served by every member on its client
port at /v3/kv/range, /v3/kv/txn, /v3/watch, /v3/lease/*, /v3/maintenance/status).

Keys and values travel base64-encoded, 64-bit integers as decimal strings, enums by name; fields
at their zero value are left out of the answers (a missing "count" is 0, a missing "succeeded" is
false). The request builders are plain functions, so the timer design's transactions can be read
and tested without a server. `AsyncGateway` (aiohttp) drives the load; `SyncGateway` (http.client,
one kept-alive connection) is the sweeper's.

A client holds every member's URL and spreads its calls over them round robin, as clientv3's
balancer does; a member that refuses the connection is skipped for MEMBER_DOWN_S, so a crash of
one member costs the caller one failed call (which it retries), not every third call.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import time
from typing import Any
from urllib.parse import urlsplit

MEMBER_DOWN_S = 1.0
CALL_TIMEOUT_S = 30.0


def b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that covers every key starting with prefix (etcd's "prefix end")."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def put(key: bytes, value: bytes, lease: int | None = None) -> dict:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def delete(key: bytes) -> dict:
    return {"request_delete_range": {"key": b64(key)}}


def get(key: bytes) -> dict:
    return {"request_range": {"key": b64(key)}}


def range_request(start: bytes, end: bytes, limit: int = 0, count_only: bool = False, keys_only: bool = False,
                  serializable: bool = False) -> dict:
    body: dict[str, Any] = {"key": b64(start), "range_end": b64(end)}
    if limit:
        body["limit"] = limit
    if count_only:
        body["count_only"] = True
    if keys_only:
        body["keys_only"] = True
    if serializable:
        body["serializable"] = True
    return body


def mod_revision_is(key: bytes, revision: int) -> dict:
    """Compare: the key was last written at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def create_revision_is(key: bytes, revision: int) -> dict:
    """Compare: the key was created at `revision` (0: the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(revision)}


def txn(compare: list[dict], success: list[dict], failure: list[dict] | None = None) -> dict:
    body: dict[str, Any] = {"compare": compare, "success": success}
    if failure:
        body["failure"] = failure
    return body


def kvs(answer: dict) -> list[dict]:
    """The key-values of a range answer: each with its key and value decoded to bytes and its
    revisions as ints."""
    found = []
    for kv in answer.get("kvs", ()):
        found.append({"key": unb64(kv["key"]), "value": unb64(kv.get("value", "")),
                      "mod_revision": int(kv.get("mod_revision", 0)),
                      "create_revision": int(kv.get("create_revision", 0))})
    return found


def txn_ranges(answer: dict) -> list[list[dict]]:
    """The kvs of each request_range of a Txn's answer, in order."""
    return [kvs(item.get("response_range", {})) for item in answer.get("responses", ())]


class GatewayError(RuntimeError):
    """etcd answered with an error (HTTP status other than 200, or an error object)."""


def _checked(status: int, body: bytes) -> dict:
    answer = json.loads(body) if body else {}
    if status != 200 or "error" in answer:
        raise GatewayError(f"etcd gateway {status}: {body[:300]!r}")
    return answer


class _MemberRing:
    """Round robin over the members, skipping one marked down until its time is up."""

    def __init__(self, urls: list[str]):
        self.urls = list(urls)
        self._turn = itertools.count()
        self._down_until = [0.0] * len(urls)

    def next(self) -> int:
        now = time.monotonic()
        for _ in range(len(self.urls)):
            index = next(self._turn) % len(self.urls)
            if self._down_until[index] <= now:
                return index
        return next(self._turn) % len(self.urls)

    def mark_down(self, index: int) -> None:
        self._down_until[index] = time.monotonic() + MEMBER_DOWN_S


class AsyncGateway:
    """aiohttp calls to the members, `concurrency` kept-alive connections at most."""

    def __init__(self, urls: list[str], concurrency: int = 1):
        import aiohttp

        self._aiohttp = aiohttp
        self.ring = _MemberRing(urls)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(1, concurrency) + 2),
            timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT_S))

    async def call(self, path: str, body: dict, member: int | None = None) -> dict:
        index = self.ring.next() if member is None else member
        try:
            async with self._session.post(self.ring.urls[index] + path, data=json.dumps(body).encode(),
                                          headers={"Content-Type": "application/json"}) as response:
                return _checked(response.status, await response.read())
        except (self._aiohttp.ClientConnectionError, TimeoutError):
            self.ring.mark_down(index)
            raise

    async def open_stream(self, path: str, body: dict):
        """A streaming call (watch): the response, whose body is one JSON object per line."""
        index = self.ring.next()
        try:
            return await self._session.post(self.ring.urls[index] + path, data=json.dumps(body).encode(),
                                            timeout=self._aiohttp.ClientTimeout(total=None, sock_read=None))
        except self._aiohttp.ClientConnectionError:
            self.ring.mark_down(index)
            raise

    async def close(self) -> None:
        await self._session.close()


class SyncGateway:
    """Blocking calls for the sweeper: one kept-alive connection to one member at a time, moved to
    the next member when that one stops answering."""

    def __init__(self, urls: list[str]):
        self.ring = _MemberRing(urls)
        self._member: int | None = None
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._member = self.ring.next()
            parts = urlsplit(self.ring.urls[self._member])
            self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=CALL_TIMEOUT_S)
        return self._conn

    def call(self, path: str, body: dict) -> dict:
        conn = self._connection()
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return _checked(response.status, response.read())
        except (OSError, http.client.HTTPException):
            self.ring.mark_down(self._member)
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
