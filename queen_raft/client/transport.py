"""HTTP to a cluster: one aiohttp session, a list of node URLs, failover and bounded retries.

Every node serves every route (a follower forwards to its group's leader), so any URL will do; the
transport sticks to the last one that answered and moves on when it does not. It retries:

- a refused or dropped connection, and a request timeout: the node is gone or cut off;
- 503 (no leader, commit timeout, an operator's pause), waiting at least its Retry-After before
  asking that node again.

Retrying a write is safe because writes are idempotent on the wire (timers by key, pushes by txn,
and the SDK mints the txn before the first attempt). Nothing else is retried: a 4xx will answer the
same again, and a 429 names its own wait for the caller to honour.

This policy is the only retry. aiohttp's ClientSession silently resends a GET, PUT or DELETE once on
a new connection when the connection it was sent on fails (ClientOSError or ServerDisconnectedError;
`retry_persistent_connection` in aiohttp/client.py, with force_close too). The caller would then be
told what the resend found: `absent` for a cancel its first send applied, or, when the resend's
connect is refused because the node died, that nothing was sent at all. Every request therefore runs
through `no_silent_resend`, a client middleware (public aiohttp API): it turns such a failure into
`SentThenLost`, which aiohttp does not resend, and this transport counts it as "may have been applied".
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote

import aiohttp
from yarl import URL

from queen_raft.client.instants import GroupClock
from queen_raft.client.tls import client_ssl_context
from queen_raft.client.errors import (ConnectionFailed, OutcomeUnknown, QueenError, Unavailable, error_from_response,
                                     retry_after_seconds)

# A call that has not answered in this long is given up on and retried elsewhere; a commit takes
# milliseconds, an election under a second, so 10 s means the node is stuck, not slow.
DEFAULT_REQUEST_TIMEOUT_S = 10.0
# Opening a TCP connection to a node on a working network takes milliseconds: a node that has not
# accepted in this long is a wrong address or a dead host, and the call moves to the next URL (or
# fails) instead of waiting for the request timeout.
DEFAULT_CONNECT_TIMEOUT_S = 2.0
# A long poll's connection is held by the server for its wait; the client allows this much more
# before calling the node stuck.
LONG_POLL_MARGIN_S = 5.0


class SentThenLost(aiohttp.ClientError):
    """The request was (or may have been) sent, then its connection failed before an answer came.

    Deliberately neither a ClientOSError nor a ServerDisconnectedError: aiohttp resends only those."""


async def no_silent_resend(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
    """A client middleware: a failure after the connection was made is raised as SentThenLost, so
    aiohttp's hidden resend of idempotent methods never runs (it wraps the whole middleware chain).
    A connect that failed (ClientConnectorError) passes as it is: nothing was sent."""
    try:
        return await handler(request)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
        raise
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
        raise SentThenLost(f"{request.method} {request.url.path}: the connection failed after the request "
                           f"was sent ({type(exc).__name__}: {exc})") from exc


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff. Both bounds hold: at most `max_attempts` tries, and no wait that
    would end past `budget_s` after the call started (a Retry-After beyond it ends the retries at once)."""

    # Each node refused (Retry-After >= 1 s) or unreachable costs one try; 16 tries span an election
    # (~0.3 s, 2 s worst measured after a kill -9) on three nodes with one of them dead.
    max_attempts: int = 16
    # The first wait is short: a connection refused by a dead node is worth retrying elsewhere now.
    initial_backoff_s: float = 0.05
    # Doubling stops here, so a long outage is polled every 2 s, not every minute.
    max_backoff_s: float = 2.0
    # The whole call, retries included, fails within this; the server's own commit timeout is
    # shorter, so a 30 s budget spans several of its refusals.
    budget_s: float = 30.0
    # A call that has not reached any node (every try refused or timed out at connect) gives up
    # after this long: no node is listening at these URLs (a wrong URL, a stopped cluster), and an
    # election does not stop nodes from accepting connections. Reaching one node lifts it.
    unreachable_budget_s: float = 3.0
    # Waits are drawn in [1 - jitter, 1] x the backoff, so clients refused together do not return together.
    jitter: float = 0.5
    # A wait a Retry-After sets is drawn in [1, 1 + retry_after_spread] x the Retry-After: never
    # earlier than the server asked, and clients refused together (an election) do not all return
    # in the same millisecond.
    retry_after_spread: float = 0.25

    def backoff_s(self, failures: int, rng: Callable[[], float] = random.random) -> float:
        """The wait after the `failures`-th failed try (1-based)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * (2 ** max(0, failures - 1)))
        return float(base * (1.0 - self.jitter * rng()))

    def refused_wait_s(self, retry_after_s: float | None, failures: int,
                       rng: Callable[[], float] = random.random) -> float:
        """The wait after a refusal (503) that said Retry-After (or did not), the `failures`-th failed try."""
        backoff = self.backoff_s(failures, rng)
        if retry_after_s is None or retry_after_s <= backoff:
            return backoff
        return float(retry_after_s * (1.0 + self.retry_after_spread * rng()))


@dataclass
class Answer:
    """A 2xx (or 204) answer. `maybe_applied_before`: an earlier attempt of this call may have been
    applied (it failed after the request was sent), which makes some refusals ambiguous."""

    status: int
    body: Any
    headers: Mapping[str, str]
    url: str
    attempts: int
    maybe_applied_before: bool = False


@dataclass
class Transport:
    urls: list[str]
    token: str | None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    session: aiohttp.ClientSession | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    # The group clock as last seen in a schedule answer: what `.at(datetime)` converts against.
    group_clock: GroupClock = field(default_factory=GroupClock)
    # Client middlewares of the caller's, run for every request of this transport (outermost first).
    # They are passed per request, with `no_silent_resend` innermost, and aiohttp then ignores the
    # session's own middlewares (a per-request list overrides the session's): give yours here.
    middlewares: Sequence[aiohttp.ClientMiddlewareType] = ()
    # The CA file that verifies https:// nodes (else QUEEN_CACERT, else the system's trust store);
    # used for the session this transport makes, not for one the caller passes.
    cafile: str | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("give at least one node URL")
        self._request_middlewares = (*self.middlewares, no_silent_resend)
        self._nodes = [URL(u.rstrip("/")) for u in self.urls]
        self._current = 0
        self._owns_session = self.session is None
        # Attempts that failed and were retried, over the client's life: how often failover happened.
        self.failed_attempts = 0

    async def open(self) -> None:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl_context(self.cafile)))
            self._owns_session = True

    async def close(self) -> None:
        if self.session is not None and self._owns_session:
            await self.session.close()
            self.session = None

    @property
    def current_url(self) -> str:
        return str(self._nodes[self._current])

    def _pick(self, not_before: list[float]) -> int:
        """The current node when this call may ask it now; else the next one that may; else the one free soonest."""
        now = time.monotonic()
        count = len(self._nodes)
        for step in range(count):
            index = (self._current + step) % count
            if not_before[index] <= now:
                return index
        return min(range(count), key=lambda i: not_before[i])

    def _fail_over(self, index: int, wait_s: float, not_before: list[float]) -> None:
        """This call does not ask that node again for wait_s; later calls start from the next node.
        The wait is the call's own: a Retry-After answers for one route (a 30 s pause of scheduling
        says nothing about a cancel), so it never holds other calls back."""
        self.failed_attempts += 1
        not_before[index] = time.monotonic() + wait_s
        if index == self._current:
            self._current = (index + 1) % len(self._nodes)

    def _body_and_headers(self, json_body: Any) -> tuple[bytes | None, dict[str, str]]:
        data = None if json_body is None else json.dumps(json_body, separators=(",", ":"), allow_nan=False).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return data, headers

    async def _send(self, method: str, node: URL, path: str, query: dict[str, str], data: bytes | None,
                    headers: dict[str, str], timeout: aiohttp.ClientTimeout) -> tuple[bytes, int, Any]:
        """One attempt on one node: the raw body, the status and the headers of its answer."""
        assert self.session is not None
        url = node.with_path(node.path.rstrip("/") + path, encoded=True)
        if query:
            url = url.with_query(query)
        async with self.session.request(method, url, data=data, headers=headers, timeout=timeout,
                                        middlewares=self._request_middlewares) as response:
            return await response.read(), response.status, response.headers

    async def request(self, method: str, path: str, *, json_body: Any = None, params: Mapping[str, Any] | None = None,
                      timeout_s: float | None = None, ok_statuses: tuple[int, ...] = (200, 201, 204),
                      idempotent: bool = True) -> Answer:
        """One call, retried per the policy. `path` is already percent-encoded (see `path_segment`).

        `idempotent=False` (an incr): only failures that prove the call was never applied (the
        connection was refused) are retried; a 503 or a lost answer is raised, outcome unknown."""
        if self.session is None:
            await self.open()
        assert self.session is not None
        started = time.monotonic()
        deadline = started + self.retry.budget_s
        data, headers = self._body_and_headers(json_body)
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        timeout = aiohttp.ClientTimeout(total=timeout_s or self.request_timeout_s, sock_connect=self.connect_timeout_s)
        maybe_applied = False
        reached = False  # some node answered this call
        last_error: QueenError | None = None
        not_before = [0.0] * len(self._nodes)  # monotonic, per node, for this call only
        for attempt in range(1, self.retry.max_attempts + 1):
            if attempt > 1 and time.monotonic() >= deadline:  # a node that hangs until the timeout also spends the budget
                break
            index = self._pick(not_before)
            node = self._nodes[index]
            if not await _wait_until_free(not_before[index], deadline):
                break
            try:
                raw, status, response_headers = await self._send(method, node, path, query, data, headers, timeout)
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:  # nothing was sent
                last_error = ConnectionFailed(0, "connection_failed", f"{node}: {exc}")
                self._fail_over(index, self.retry.backoff_s(attempt), not_before)
                if not reached and time.monotonic() - started >= self.retry.unreachable_budget_s:
                    break
                continue
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # sent, then lost: may have been applied
                maybe_applied = True
                last_error = ConnectionFailed(0, "connection_failed", f"{node}: {type(exc).__name__} {exc}")
                self._fail_over(index, self.retry.backoff_s(attempt), not_before)
                if not idempotent:
                    raise OutcomeUnknown(0, "outcome_unknown", f"{last_error.message}; not retried: the call is not "
                                         "idempotent and may have been applied") from exc
                continue
            reached = True
            body = _decode_body(raw)
            if status in ok_statuses:
                self._current = index
                return Answer(status, body, response_headers, str(node), attempt, maybe_applied)
            error = error_from_response(status, body, response_headers)
            if status != 503:
                error.maybe_applied_before = maybe_applied
                raise error
            # 503: the group could not answer; the outcome of a write may be unknown (it may still commit).
            maybe_applied = True
            last_error = error
            if not idempotent:
                raise error
            self._fail_over(index, self.retry.refused_wait_s(retry_after_seconds(response_headers), attempt), not_before)
            if time.monotonic() >= deadline:
                break
        raise _budget_spent(last_error, maybe_applied)


def _budget_spent(last_error: QueenError | None, maybe_applied: bool) -> QueenError:
    """The error a call raises when its attempts or its retry budget ran out: the last failure seen."""
    if last_error is None:
        last_error = Unavailable(0, "retry_budget_exhausted", "no attempt could be made within the retry budget")
    last_error.maybe_applied_before = maybe_applied
    return last_error


async def _wait_until_free(not_before: float, deadline: float) -> bool:
    """Sleep until a node may be asked again (monotonic `not_before`); False when that is past the deadline."""
    wait = not_before - time.monotonic()
    if wait > 0:
        if time.monotonic() + wait > deadline:
            return False
        await asyncio.sleep(wait)
    return True


def path_segment(text: str, keep_slashes: bool = False) -> str:
    """One percent-encoded path segment. A timerKey is a catch-all on the server (`tenant/42` is a
    key), so its slashes may stay; everything else that is not unreserved is encoded once."""
    return quote(text, safe="/" if keep_slashes else "")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _decode_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
