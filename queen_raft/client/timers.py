"""`q.timer("reminders").key("order-9137").delay("24h").payload({...}).schedule()` and its reads.

A `TimerBuilder` is immutable: every setter returns a new one, so `t = q.timer("r").key("k")` can be
kept and reused (`t.delay("24h").payload(p).schedule()`, later `t.cancel()`).
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, AsyncIterator, Iterable, TypeVar

from queen_raft.client.batch import MAX_TIMER_OPS_PER_CALL, TimerRow, send_schedules
from queen_raft.client.durations import Duration, duration_ms
from queen_raft.client.instants import GroupClock, instant_ms, local_ms
from queen_raft.client.errors import OutcomeUnknown
from queen_raft.client.payloads import timer_payload_fields
from queen_raft.client.results import TimerPage, TimerPeek, TimerResult
from queen_raft.client.transport import Transport, path_segment

_UNSET: Any = object()
Setters = TypeVar("Setters", bound="TimerSetters")


def mint_txn() -> str:
    """A fresh transaction id, minted once per schedule call before its first attempt, so every
    retry of that call carries the same one and the fired message is deduplicated by it."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class TimerSpec:
    """What a schedule or cancel op says; `schedule_op()` / `cancel_op()` are the exact wire ops."""

    queue: str
    timer_key: str | None = None
    delay: Duration | None = None
    at: datetime | None = None  # an absolute instant instead of a delay
    require_pending: bool = False  # a transaction's cancel: roll back unless the timer is pending
    partition: str | None = None
    txn: str | None = None
    payload: Any = _UNSET
    zstd: bool = False

    def schedule_op(self, txn: str | None = None, clock: GroupClock | None = None) -> dict[str, Any]:
        """The `schedule` op of POST /api/v1/timers (and of a transaction's `timers`); an `at`
        instant becomes a delay on `clock`, the group clock as last seen."""
        if self.timer_key is None:
            raise ValueError(f"timer on {self.queue!r}: call .key(...) before .schedule()")
        if self.delay is None and self.at is None:
            raise ValueError(f"timer {self.queue}/{self.timer_key}: call .delay(...) or .at(...) before .schedule()")
        if self.payload is _UNSET:
            raise ValueError(f"timer {self.queue}/{self.timer_key}: call .payload(...) before .schedule() "
                             "(None is a valid JSON payload, b'' an empty one)")
        op: dict[str, Any] = {"op": "schedule", "queue": self.queue, "timerKey": self.timer_key,
                              "delayMs": self._delay_ms(clock), "txn": self.txn or txn or mint_txn()}
        op.update(timer_payload_fields(self.payload, self.zstd))
        if self.partition is not None:
            op["partition"] = self.partition
        return op

    def _delay_ms(self, clock: GroupClock | None) -> int:
        if self.at is not None:
            return (clock or GroupClock()).delay_until(self.at)
        assert self.delay is not None
        return duration_ms(self.delay)

    def cancel_op(self) -> dict[str, Any]:
        if self.timer_key is None:
            raise ValueError(f"timer on {self.queue!r}: call .key(...) before .cancel()")
        op: dict[str, Any] = {"op": "cancel", "queue": self.queue, "timerKey": self.timer_key}
        if self.txn is not None:
            op["txn"] = self.txn
        if self.require_pending:
            op["requirePending"] = True
        return op


class TimerSetters(ABC):
    """The fluent setters, shared by the standalone builder and the one inside a transaction."""

    spec: TimerSpec

    @abstractmethod
    def _with(self: Setters, **changes: Any) -> Setters:
        """A copy of this builder (of its own kind) with the spec changed."""

    def key(self: Setters, timer_key: str) -> Setters:
        return self._with(timer_key=timer_key)

    def delay(self: Setters, delay: Duration) -> Setters:
        """'15m', '72h', '1h30m', '250ms' or a timedelta; a bare integer other than 0 is a TypeError."""
        duration_ms(delay)  # a bad duration fails where it is written, not at schedule()
        return self._with(delay=delay, at=None)

    def at(self: Setters, instant: datetime) -> Setters:
        """Deliver at this instant (a timezone-aware datetime; naive is a TypeError), converted to a
        delay on the group clock as last seen by this client (docs/sdk.md, Timers)."""
        instant_ms(instant)
        return self._with(at=instant, delay=None)

    def partition(self: Setters, partition: str) -> Setters:
        return self._with(partition=partition)

    def txn(self: Setters, txn: str) -> Setters:
        return self._with(txn=txn)

    def payload(self: Setters, value: Any, *, zstd: bool = False) -> Setters:
        """A JSON value (encoded compactly) or bytes (sent as they are); `zstd=True` compresses them
        and sets `payloadZstd`, and the broker decompresses at the fire."""
        return self._with(payload=value, zstd=zstd)


class TimerBuilder(TimerSetters):
    def __init__(self, transport: Transport, spec: TimerSpec):
        self._transport = transport
        self.spec = spec

    def _with(self, **changes: Any) -> "TimerBuilder":
        return TimerBuilder(self._transport, replace(self.spec, **changes))

    def _path(self) -> str:
        if self.spec.timer_key is None:
            raise ValueError(f"timer on {self.spec.queue!r}: call .key(...) first")
        return f"/api/v1/timers/{path_segment(self.spec.queue)}/{path_segment(self.spec.timer_key, keep_slashes=True)}"

    async def schedule(self) -> TimerResult:
        """Schedule, or reschedule when the key has a pending timer (one upsert). Retried safely:
        the txn is fixed before the first attempt."""
        op = self.spec.schedule_op(clock=self._transport.group_clock)
        answer = await self._transport.request("POST", "/api/v1/timers", json_body={"operations": [op]})
        result = TimerResult.from_wire(answer.body["results"][0])
        if result.deliver_at is not None:
            self._transport.group_clock.observe(op["delayMs"], result.deliver_at, local_ms())
        return result

    async def schedule_many(self, rows: Iterable[TimerRow], chunk_size: int = MAX_TIMER_OPS_PER_CALL) -> list[TimerResult]:
        """Many timers of this queue (`TimerRow`s), in calls of at most `chunk_size` (the server's
        default cap); one result per row, in order. BatchInterrupted when a call fails."""
        clock = self._transport.group_clock
        ops = [TimerSpec(queue=self.spec.queue, timer_key=row.key, delay=row.delay, at=row.at, partition=row.partition,
                         txn=row.txn, payload=row.payload, zstd=row.zstd).schedule_op(clock=clock) for row in rows]
        return await send_schedules(self._transport, ops, chunk_size)

    async def cancel(self) -> TimerResult:
        """The DELETE route, which no pause, rate or quota refuses. `fired` (ok false): it fired,
        and `partition`/`offset` name its message (`dead_lettered`: filed in the DLQ as `dlq_id`).
        `absent` (ok false): never seen, or its fire is forgotten (past the queue's dedup window);
        the echoed txn is the transactionId to look for in the queue.

        `absent` answered to a retry whose earlier attempt may have been applied is OutcomeUnknown:
        that attempt may have been the one that cancelled it. `fired` is never: a cancel that
        removes the timer also forgets any earlier fire of the key, so the fire came first."""
        params = {"txn": self.spec.txn} if self.spec.txn is not None else None
        answer = await self._transport.request("DELETE", self._path(), params=params)
        result = TimerResult.from_wire(answer.body)
        if result.status == "absent" and answer.maybe_applied_before:
            raise OutcomeUnknown(answer.status, "outcome_unknown",
                                 f"the cancel of {self.spec.queue}/{self.spec.timer_key} was retried and found no "
                                 "pending timer: the first try may have cancelled it, or it fired")
        return result

    async def peek(self) -> TimerPeek:
        answer = await self._transport.request("GET", self._path())
        return TimerPeek.from_wire(answer.body)

    async def list(self, limit: int | None = None, after: str | None = None,
                   prefix: str | None = None) -> TimerPage:
        """One keyset page of the queue's pending timers (server default 100, clamped to 1..1000);
        with `prefix`, only those whose timerKey starts with it."""
        answer = await self._transport.request(
            "GET", f"/api/v1/timers/{path_segment(self.spec.queue)}",
            params={"limit": limit, "after": after, "prefix": prefix})
        return TimerPage.from_wire(answer.body)

    async def rows(self, page_size: int | None = None, after: str | None = None,
                   prefix: str | None = None) -> AsyncIterator[TimerPeek]:
        """Every pending timer of the queue (with `prefix`: whose timerKey starts with it), page
        after page (each page its own linearizable read)."""
        while True:
            page = await self.list(limit=page_size, after=after, prefix=prefix)
            for row in page.rows:
                yield row
            if not page.truncated or page.next_after is None:
                return
            after = page.next_after

