"""Popped messages and the consumer loop: pop (a write: it takes a lease), ack/nack, lease extension."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from queen_raft.client.durations import Duration, duration_ms, duration_seconds
from queen_raft.client.errors import AckRefused, NotFound, OutcomeUnknown, QueenError
from queen_raft.client.payloads import message_payload
from queen_raft.client.results import AckResult, LeaseExtension
from queen_raft.client.transport import LONG_POLL_MARGIN_S, Transport, path_segment

log = logging.getLogger(__name__)

# The server caps one long poll at 60 s; a longer wait is several polls.
MAX_POLL_WAIT_MS = 60_000
DEFAULT_POLL_WAIT = "30s"
# Automatic extension renews a lease when a third of the extension is used up, so two renewals
# can fail (an election, a slow commit) before the lease runs out under a running handler.
LEASE_RENEW_FRACTION = 1 / 3
ACK_STATUSES = ("completed", "failed", "retry", "dlq")
# How the server words a retried ack whose first try settled the message with another status
# (queen_raft/state/released.py).
ALREADY_SETTLED = "already settled as"


@dataclass
class Message:
    """One popped message. Settle it with `ack()`, `nack()` (failed: spends one of the queue's
    retries), `retry()` (back to the queue, no retry spent) or `dead_letter()`."""

    queue: str
    partition: str
    offset: int
    transaction_id: str
    message_id: str
    lease_id: str | None
    consumer_group: str | None  # the group named at pop; None is the queue-mode group
    delivery_attempt: int
    payload: Any  # the JSON value, or bytes when the payload is not UTF-8 JSON
    created_at: int | None
    raw: dict = field(repr=False, compare=False)
    _transport: Transport | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_wire(cls, wire: dict, queue: str, group: str | None, transport: Transport | None) -> "Message":
        return cls(queue=wire.get("queue", queue), partition=wire.get("partition", "Default"),
                   offset=wire.get("offset", -1), transaction_id=wire.get("transactionId", ""),
                   message_id=wire.get("messageId", ""), lease_id=wire.get("leaseId"), consumer_group=group,
                   delivery_attempt=int(wire.get("deliveryAttempt") or 1), payload=message_payload(wire),
                   created_at=wire.get("createdAt"), raw=wire, _transport=transport)

    def ack_item(self, status: str = "completed", error: str | None = None) -> dict:
        """This message's entry in an `acknowledgments` array (also used inside a transaction)."""
        if status not in ACK_STATUSES:
            raise ValueError(f"ack status {status!r} is not one of {', '.join(ACK_STATUSES)}")
        item: dict[str, Any] = {"queue": self.queue, "partition": self.partition,
                                "transactionId": self.transaction_id, "status": status}
        if error is not None:
            item["error"] = error
        return item

    async def settle(self, status: str, error: str | None = None) -> AckResult:
        """One acknowledgment; its verdict (success, dlq), or AckRefused.

        Safe to retry: the server remembers what a lease settled, while it is held and for a while
        after its acks released it, so a retry whose first try was applied answers that try's
        verdict (`retried` true)."""
        transport = self._require_transport()
        body: dict[str, Any] = {"leaseId": self.lease_id, "acknowledgments": [self.ack_item(status, error)]}
        if self.consumer_group is not None:
            body["consumerGroup"] = self.consumer_group
        answer = await transport.request("POST", "/api/v1/ack/batch", json_body=body)
        verdict = answer.body["results"][0]
        if not verdict.get("success"):
            code = verdict.get("error") or "ack_refused"
            settled_as = verdict.get("message") or ""
            if settled_as.startswith(ALREADY_SETTLED):
                # The server remembers this lease's settlements: a retry with the first try's
                # status answers success; this one asked for another status than the first.
                raise AckRefused(answer.status, code, f"ack of {self.queue}/{self.partition} offset {self.offset} "
                                 f"refused: {settled_as}", body=answer.body)
            if answer.maybe_applied_before:
                # Beyond the server's memory of released leases (or the lease expired): the first
                # try may have settled it and the retry found nothing left to settle.
                raise OutcomeUnknown(answer.status, code, f"the ack of offset {self.offset} was retried and then refused "
                                     f"({code}): the first try may have settled it", body=answer.body)
            raise AckRefused(answer.status, code, f"ack of {self.queue}/{self.partition} offset {self.offset} refused: {code}",
                             body=answer.body)
        return AckResult.from_wire(verdict, retried=answer.maybe_applied_before)

    async def ack(self) -> AckResult:
        return await self.settle("completed")

    async def nack(self, error: str | None = None) -> AckResult:
        """`failed`: spends a retry; past the queue's retryLimit the message goes to its DLQ."""
        return await self.settle("failed", error)

    async def retry(self) -> AckResult:
        """`retry`: released for the next pop without spending a retry."""
        return await self.settle("retry")

    async def dead_letter(self, error: str | None = None) -> AckResult:
        return await self.settle("dlq", error)

    async def extend(self, duration: Duration) -> LeaseExtension:
        """The lease (shared by the messages of one pop) now ends `duration` ("90s", whole seconds)
        after the group's now."""
        if self.lease_id is None:
            raise ValueError("this message was popped with auto_ack: it holds no lease")
        return await extend_lease(self._require_transport(), self.lease_id, duration)

    def _require_transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError("this Message is not bound to a Queen client's transport")
        return self._transport


async def extend_lease(transport: Transport, lease_id: str, duration: Duration) -> LeaseExtension:
    """The lease ends `duration` (whole seconds) after the group's now. NotFound (invalid_lease)
    once the lease expired or every message of it was settled."""
    answer = await transport.request("POST", f"/api/v1/lease/{path_segment(lease_id)}/extend",
                                     json_body={"seconds": duration_seconds(duration)})
    return LeaseExtension(lease_id=answer.body.get("leaseId", lease_id), expires_at=answer.body.get("expiresAt"),
                          raw=answer.body)


@dataclass(frozen=True)
class PopTarget:
    """The path and query of a pop (GET, or POST carrying acknowledgments), and how long to allow it."""

    path: str
    params: dict[str, Any]
    timeout_s: float


def pop_target(transport: Transport, queue: str, group: str | None, partition: str | None, batch: int,
               wait: Duration | None, auto_ack: bool) -> PopTarget:
    path = f"/api/v1/pop/queue/{path_segment(queue)}"
    if partition is not None:
        path += f"/partition/{path_segment(partition)}"
    wait_ms = 0 if wait is None else duration_ms(wait)
    if not 0 <= wait_ms <= MAX_POLL_WAIT_MS:
        raise ValueError(f"a pop waits 0..{MAX_POLL_WAIT_MS} ms, got {wait_ms}")
    params: dict[str, Any] = {"consumerGroup": group, "batch": batch, "autoAck": auto_ack or None}
    if wait_ms > 0:
        params.update(wait=True, timeout=wait_ms)
    return PopTarget(path, params, max(transport.request_timeout_s, wait_ms / 1000 + LONG_POLL_MARGIN_S))


async def pop(transport: Transport, queue: str, *, group: str | None = None, partition: str | None = None, batch: int = 1,
              wait: Duration | None = None, auto_ack: bool = False) -> list[Message]:
    """One pop: up to `batch` messages of one partition under one lease, or [] when none came within `wait`."""
    target = pop_target(transport, queue, group, partition, batch, wait, auto_ack)
    answer = await transport.request("GET", target.path, params=target.params, timeout_s=target.timeout_s)
    if answer.status == 204 or not answer.body:
        return []
    return [Message.from_wire(m, queue, group, transport) for m in answer.body.get("messages", [])]


async def consume(transport: Transport, queue: str, *, group: str | None = None, partition: str | None = None,
                  batch: int = 1, wait: Duration = DEFAULT_POLL_WAIT,
                  keep_lease: Duration | None = None) -> AsyncIterator[Message]:
    """Yields messages forever (break out to stop). With `keep_lease`, the lease of the messages being
    handled is extended by that much, again and again, until the loop asks for the next pop, so a
    slow handler does not lose its lease. Unsettled messages come back when their lease expires."""
    renew_s = None if keep_lease is None else duration_seconds(keep_lease)
    if renew_s is not None and renew_s < 1:
        raise ValueError("keep_lease must be at least 1s")
    if duration_ms(wait) <= 0:
        raise ValueError("consume long-polls: give it a wait above 0 (an empty queue would otherwise be polled in a busy loop)")
    while True:
        messages = await pop(transport, queue, group=group, partition=partition, batch=batch, wait=wait)
        if not messages:
            continue
        async with lease_kept(transport, messages[0].lease_id, renew_s):
            for message in messages:
                yield message


@contextlib.asynccontextmanager
async def lease_kept(transport: Transport, lease_id: str | None, renew_s: int | None) -> AsyncIterator[None]:
    """While the body runs, the lease is extended every so often (none without a lease or renew_s)."""
    keeper = None
    if renew_s is not None and lease_id is not None:
        keeper = asyncio.create_task(renew_lease_until_cancelled(transport, lease_id, renew_s))
    try:
        yield
    finally:
        if keeper is not None:
            keeper.cancel()
            try:
                await keeper
            except asyncio.CancelledError:
                pass


async def renew_lease_until_cancelled(transport: Transport, lease_id: str, seconds: int) -> None:
    interval = seconds * LEASE_RENEW_FRACTION
    while True:
        await asyncio.sleep(interval)
        try:
            await extend_lease(transport, lease_id, f"{seconds}s")
        except NotFound:  # every message settled (the lease is released) or it expired: nothing to keep
            return
        except QueenError as exc:  # a failed renewal is retried at the next interval; the lease has slack
            log.warning("could not extend lease %s: %s", lease_id, exc)
