"""`Queen`: the client. One aiohttp session, the cluster's node URLs, and the entry points."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence

import aiohttp

from queen_raft.client.consumer import DEFAULT_POLL_WAIT, Message, consume, extend_lease, pop
from queen_raft.client.durations import Duration
from queen_raft.client.errors import NotFound, OutcomeUnknown, PushRefused
from queen_raft.client.kv import KvNamespace
from queen_raft.client.payloads import message_payload, push_payload_fields
from queen_raft.client.pop_round import Batch, PopRound, Settle, ack_and_pop, consume_batches
from queen_raft.client.results import DlqPage, DlqRow, LeaseExtension, PushResult
from queen_raft.client.timers import TimerBuilder, TimerSpec, mint_txn
from queen_raft.client.transaction import Transaction
from queen_raft.client.admin_results import QueueOptions, Usage
from queen_raft.client.batch import ack_many
from queen_raft.client.results import AckResult
from queen_raft.client.transport import (DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S, RetryPolicy, Transport,
                                         path_segment)

# QUEEN_URL may hold several node URLs, separated by commas.
URL_ENV = "QUEEN_URL"
TOKEN_ENV = "QUEEN_TOKEN"


def urls_from_env() -> list[str]:
    return [u.strip() for u in os.environ.get(URL_ENV, "").split(",") if u.strip()]


@dataclass(frozen=True)
class Record:
    """A message read back by offset (fetch): no lease, nothing to settle."""

    queue: str
    partition: str
    offset: int
    transaction_id: str
    message_id: str
    payload: Any
    created_at: int | None
    raw: dict


class Queen:
    """`async with Queen(urls=[...], token=...) as q:`. Without arguments, QUEEN_URL and QUEEN_TOKEN."""

    def __init__(self, urls: list[str] | str | None = None, token: str | None = None, *,
                 retry: RetryPolicy | None = None, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                 session: aiohttp.ClientSession | None = None,
                 middlewares: Sequence[aiohttp.ClientMiddlewareType] = (),
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, cafile: str | None = None):
        """`connect_timeout_s`: a node that has not accepted the TCP connection in this long is
        skipped (a wrong URL fails in seconds, see RetryPolicy.unreachable_budget_s).

        `session`: yours, kept open at close. Its client middlewares do not run for this client's
        requests (each request passes its own list, which aiohttp lets override the session's, to
        forbid aiohttp's silent resend: see transport.py); pass them as `middlewares` instead.

        `cafile`: the PEM file of the CA that signed the nodes' certificates, for https:// URLs
        (default: QUEEN_CACERT, else the system's trust store). Not used with your own `session`."""
        if isinstance(urls, str):
            urls = [urls]
        urls = list(urls) if urls else urls_from_env()
        if not urls:
            raise ValueError(f"give the node URLs (urls=[...] or {URL_ENV}=http://host:port,...)")
        self.transport = Transport(urls=urls, token=token if token is not None else os.environ.get(TOKEN_ENV),
                                   retry=retry or RetryPolicy(), request_timeout_s=request_timeout_s, session=session,
                                   middlewares=tuple(middlewares), connect_timeout_s=connect_timeout_s,
                                   cafile=cafile)

    async def __aenter__(self) -> "Queen":
        await self.transport.open()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.transport.close()

    # -- timers ------------------------------------------------------------------------------

    def timer(self, queue: str) -> TimerBuilder:
        return TimerBuilder(self.transport, TimerSpec(queue=queue))

    # -- messages ----------------------------------------------------------------------------

    async def push(self, queue: str, payload: Any, *, partition: str | None = None, txn: str | None = None,
                   trace_id: str | None = None) -> PushResult:
        """One message; `txn` (its transactionId) is minted when absent, before the first attempt, so a
        retry answers `duplicate` with the original offset instead of appending twice."""
        item: dict[str, Any] = {"queue": queue, "transactionId": txn or mint_txn(), **push_payload_fields(payload)}
        if partition is not None:
            item["partition"] = partition
        if trace_id is not None:
            item["traceId"] = trace_id
        answer = await self.transport.request("POST", "/api/v1/push", json_body={"items": [item]})
        verdict = answer.body["results"][0]
        if verdict.get("status") == "error":
            code = verdict.get("error") or "push_refused"
            raise PushRefused(answer.status, code, f"push to {queue} refused: {code}", body=answer.body)
        return PushResult.from_wire(verdict)

    async def pop(self, queue: str, *, group: str | None = None, partition: str | None = None, batch: int = 1,
                  wait: Duration | None = None, auto_ack: bool = False) -> list[Message]:
        return await pop(self.transport, queue, group=group, partition=partition, batch=batch, wait=wait, auto_ack=auto_ack)

    def consume(self, queue: str, *, group: str | None = None, partition: str | None = None, batch: int = 1,
                wait: Duration = DEFAULT_POLL_WAIT, keep_lease: Duration | None = None) -> AsyncIterator[Message]:
        return consume(self.transport, queue, group=group, partition=partition, batch=batch, wait=wait, keep_lease=keep_lease)

    async def ack_and_pop(self, queue: str, settle: Sequence[Settle], *, group: str | None = None,
                          partition: str | None = None, batch: int = 1, wait: Duration | None = None,
                          auto_ack: bool = False) -> PopRound:
        """Settle messages of one earlier pop (a Message is `completed`; a Settlement names its
        status), then pop, in one call and one Raft entry: a consumer round at one commit round.
        One verdict per settlement in `acks`; with nothing to settle, a plain pop."""
        return await ack_and_pop(self.transport, queue, settle, group=group, partition=partition, batch=batch,
                                 wait=wait, auto_ack=auto_ack)

    def consume_batches(self, queue: str, *, group: str | None = None, partition: str | None = None,
                        batch: int = 100, wait: Duration = DEFAULT_POLL_WAIT,
                        keep_lease: Duration | None = None) -> AsyncIterator[Batch]:
        """Yields a Batch per pop; what the caller settles on it rides the next pop (one call a round)."""
        return consume_batches(self.transport, queue, group=group, partition=partition, batch=batch, wait=wait,
                               keep_lease=keep_lease)

    async def ack_many(self, messages: Sequence[Message], status: str = "completed", *,
                       error: str | None = None) -> list[AckResult]:
        """Settles many popped messages, one call per lease (at most 1000 each); one verdict per
        message, in order. A refused item is a verdict with `success` false."""
        return await ack_many(self.transport, messages, status, error)

    async def extend_lease(self, lease_id: str, duration: Duration) -> LeaseExtension:
        """The lease ends `duration` (whole seconds) after the group's now. NotFound (invalid_lease)
        once the lease expired or every message of it was settled."""
        return await extend_lease(self.transport, lease_id, duration)

    async def fetch(self, queue: str, partition: str = "Default", offset: int = 0, limit: int = 100) -> list[Record]:
        """Messages by offset, without a lease: the message a cancel answered `fired` names (its partition
        and offset), or a search for a txn after a cancel answered `absent`."""
        answer = await self.transport.request("POST", "/api/v1/fetch", json_body={
            "entries": [{"queue": queue, "partition": partition, "offset": offset, "limit": limit}]})
        return [Record(queue=queue, partition=partition, offset=r.get("offset", -1),
                       transaction_id=r.get("transactionId", ""), message_id=r.get("messageId", ""),
                       payload=message_payload(r), created_at=r.get("createdAt"), raw=r)
                for r in answer.body["entries"][0]["records"]]

    async def configure(self, queue: str, options: dict, mode: str = "merge") -> QueueOptions:
        """A queue's options (leaseTime, retryLimit, ...); answers the options in force."""
        answer = await self.transport.request("POST", "/api/v1/configure",
                                              json_body={"queue": queue, "options": options, "mode": mode})
        return QueueOptions.from_wire(answer.body, queue)

    # -- dead letters and operator switches ----------------------------------------------------

    async def dlq(self, queue: str | None = None, limit: int | None = None, after: str | None = None) -> list[DlqRow]:
        """The rows of one page of `dlq_page`."""
        return (await self.dlq_page(queue, limit=limit, after=after)).rows

    async def dlq_page(self, queue: str | None = None, limit: int | None = None,
                       after: str | None = None) -> DlqPage:
        """One page of dead-letter rows of one queue, or of every queue, in filing order (server
        default 100, clamped to 1..1000), after the row `after` (the previous page's next_after)."""
        answer = await self.transport.request("GET", "/api/v1/dlq", params={"queue": queue, "limit": limit,
                                                                             "after": after})
        return DlqPage.from_wire(answer.body)

    async def dlq_rows(self, queue: str | None = None, page_size: int | None = None,
                       after: str | None = None) -> AsyncIterator[DlqRow]:
        """Every dead-letter row, page after page (each page its own linearizable read; a row filed
        meanwhile comes last, a row replayed meanwhile may be missed or seen before it went)."""
        while True:
            page = await self.dlq_page(queue, limit=page_size, after=after)
            for row in page.rows:
                yield row
            if not page.truncated or page.next_after is None:
                return
            after = page.next_after

    async def replay(self, dlq_id: str) -> PushResult:
        """Pushes the row's message again (a new messageId, which is also its transactionId).
        Conflict for a timer's row. A retried replay that finds the row gone (its first try replayed
        it) is OutcomeUnknown."""
        try:
            answer = await self.transport.request("POST", f"/api/v1/dlq/{path_segment(dlq_id)}/replay")
        except NotFound as exc:
            if exc.maybe_applied_before:
                raise OutcomeUnknown(exc.status, exc.code, f"the replay of {dlq_id} was retried and the row was gone: "
                                     "the first try may have replayed it", body=exc.body) from exc
            raise
        if answer.body.get("status") == "error":
            code = answer.body.get("error") or "push_refused"
            raise PushRefused(answer.status, code, f"the replay of {dlq_id} was refused by its queue: {code}", body=answer.body)
        return PushResult.from_wire(answer.body)

    async def pause_scheduling(self) -> bool:
        """Admin: refuse new schedules for the tenant (503 timers_disabled); fires and cancels go on."""
        answer = await self.transport.request("POST", "/api/v1/admin/timers/pause")
        return bool(answer.body.get("paused"))

    async def resume_scheduling(self) -> bool:
        answer = await self.transport.request("POST", "/api/v1/admin/timers/resume")
        return bool(answer.body.get("paused"))

    async def usage(self) -> Usage:
        """Admin: billed and pushed messages, pending timers, fires by result, the pause flag."""
        return Usage.from_wire((await self.transport.request("GET", "/api/v1/usage")).body)

    # -- transactions and KV -----------------------------------------------------------------

    def transaction(self) -> Transaction:
        return Transaction(self.transport)

    def kv(self, ns: str) -> KvNamespace:
        return KvNamespace(self.transport, ns)
