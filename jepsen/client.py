"""HTTP calls to one node, each classified the way a checker must read it.

- 2xx: `ok`, the body is the answer.
- 4xx: `fail`, the node refused the call before proposing anything (the gates of docs/spec.md section 2).
- 503 `timers_disabled`: `fail` (the operator's pause gate, checked before any proposal).
- 503 whose `reason` field says it was refused before anything was proposed or forwarded
  (`no_leader`, `busy`, `queue_full`: see queen_raft/raft/errors.py and pysyncobj's MISSING_LEADER
  path, which neither logs nor sends the command; `paused`, `no_encryption_key`: the API's own
  gates): `fail`. A body without the field (a node that predates it) falls back to the reason
  inside the message text; anything unrecognised stays `info`.
- a TCP connect that was refused (aiohttp's ClientConnectorError): `fail`, as in Jepsen: no byte of
  the request left the harness. That holds only because no request is ever resent behind the
  history's back: see `open_session`.
- any other 5xx, a timeout, a connection dropped after connecting: `info`. A 503 for a commit
  timeout or a leader change means the entry may still commit later.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from jepsen.history import FAIL, INFO, OK
from queen_raft.client.transport import no_silent_resend

# Above the node's commit timeout (QUEEN_RAFT_COMMIT_TIMEOUT_MS, 5 s) so a slow commit comes back as
# the node's own 503 rather than as our timeout; below it everything would be info for nothing.
REQUEST_TIMEOUT_S = 8.0
# 5xx error codes that are refusals made before any proposal: certainly not applied.
DEFINITE_5XX_ERRORS = {"timers_disabled"}
# 503 reasons (queen_raft/api/errors.py) given before the command is proposed or forwarded
# (certainly not applied). leader_changed and timeout are left out: their entry may still commit.
NOT_PROPOSED_REASONS = ("no_leader", "busy", "queue_full", "paused", "no_encryption_key")
UNAVAILABLE_REASON_MARK = "cannot answer now ("


def open_session(connection_limit: int) -> aiohttp.ClientSession:
    """The harness's HTTP session. aiohttp silently resends an idempotent method (DELETE, GET, PUT)
    once on a new connection when the one it was sent on fails, with force_close too; when the
    resend's connect is refused (the node was killed) it reports a ClientConnectorError, which would
    be judged `fail` (certainly not applied) although the first send reached the node and may have
    committed. Seen: a cancel proposed at the instant of a kill-all, committed, and judged not
    applied (jepsen/findings/2026-11-30-timers-kill-s1-lost-reschedule). The SDK's
    `no_silent_resend` middleware raises such a failure as SentThenLost, a ClientError, so `info`.
    A fresh connection per request keeps a killed connection from touching the next operation."""
    connector = aiohttp.TCPConnector(limit=connection_limit, force_close=True)
    return aiohttp.ClientSession(connector=connector, middlewares=(no_silent_resend,))


@dataclass
class Outcome:
    type: str  # ok | fail | info
    status: int | None  # HTTP status, None when no answer came
    body: Any  # parsed JSON, or {"error": ...} describing what went wrong

    @property
    def answer(self) -> dict:
        return {"status": self.status, "body": self.body}


def classify(status: int, body: Any) -> str:
    if 200 <= status < 300:
        return OK
    if 400 <= status < 500:
        return FAIL
    if isinstance(body, dict) and body.get("error") in DEFINITE_5XX_ERRORS:
        return FAIL
    if status == 503 and unavailable_reason(body) in NOT_PROPOSED_REASONS:
        return FAIL
    return INFO


def unavailable_reason(body: Any) -> str | None:
    """A 503 body's `reason`; without one, the reason in its message ("... cannot answer now (no_leader) ...")."""
    if not isinstance(body, dict):
        return None
    reason = body.get("reason")
    if isinstance(reason, str):
        return reason
    message = body.get("message")
    if not isinstance(message, str) or UNAVAILABLE_REASON_MARK not in message:
        return None
    tail = message.split(UNAVAILABLE_REASON_MARK, 1)[1]
    return tail.split(")", 1)[0].split(":", 1)[0].strip()


class NodeClient:
    """Requests to one node with one tenant token; never raises for network trouble."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.session = session
        self.base_url = base_url
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def request(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> Outcome:
        headers = {"Authorization": f"Bearer {self.token}"}
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else self.timeout
        try:
            async with self.session.request(
                method, self.base_url + path, json=body, headers=headers, timeout=timeout
            ) as response:
                raw = await response.read()
                parsed: Any
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = {"error": "unparsable_body", "text": raw[:200].decode("utf-8", "replace")}
                return Outcome(classify(response.status, parsed), response.status, parsed)
        except asyncio.TimeoutError:
            return Outcome(INFO, None, {"error": "timeout"})
        except aiohttp.ClientConnectorError as error:
            # connect() failed: nothing was sent.
            return Outcome(FAIL, None, {"error": "connect_failed", "message": str(error)[:200]})
        except aiohttp.ClientError as error:
            return Outcome(INFO, None, {"error": type(error).__name__, "message": str(error)[:200]})
        except OSError as error:
            return Outcome(INFO, None, {"error": "os_error", "message": str(error)[:200]})


class HistoryClient:
    """Makes calls on behalf of logical processes and writes each invocation and completion.

    `normalize(outcome) -> (type, answer)` lets a workload keep the history compact (a pop keeps
    the offsets and txns it got, not the payloads) and refine the type from the body (a 200 whose
    per-item verdict is an error is a `fail` for that item).
    """

    def __init__(self, session: aiohttp.ClientSession, history, urls: dict[str, str], token: str,
                 workload: str | None = None) -> None:
        self.session = session
        self.history = history
        self.nodes = {node_id: NodeClient(session, url, token) for node_id, url in urls.items()}
        # Written on every event, so each workload's checkers judge its own operations (its tenant's).
        self.workload = workload

    @property
    def node_ids(self) -> list[str]:
        return list(self.nodes)

    async def call(self, process, node_id: str, f: str, value, method: str, path: str, body=None,
                   normalize=None, timeout_s: float | None = None) -> tuple[str, Any]:
        invocation = self.history.invoke(process, f, value, node_id, self.workload)
        outcome = await self.nodes[node_id].request(method, path, body, timeout_s)
        type_, answer = (outcome.type, outcome.answer) if normalize is None else normalize(outcome)
        self.history.complete(invocation, type_, answer)
        return type_, answer
