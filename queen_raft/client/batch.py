"""Batch calls: `q.timer(queue).schedule_many(rows)` and `q.ack_many(messages, status)`.

Both split the work into the largest calls the server takes and return one result per input, in
input order. A chunk that fails raises `BatchInterrupted` holding the results of the chunks before
it (committed) and the error; nothing after it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

from queen_raft.client.consumer import Message
from queen_raft.client.durations import Duration
from queen_raft.client.errors import QueenError
from queen_raft.client.instants import local_ms
from queen_raft.client.results import AckResult, TimerResult
from queen_raft.client.transport import Transport

# The server's default cap of ops per POST /api/v1/timers (QUEEN_TIMERS_MAX_OPS_PER_CALL).
MAX_TIMER_OPS_PER_CALL = 256
# The cap of acknowledgments per POST /api/v1/ack/batch.
MAX_ACKS_PER_CALL = 1000


class BatchInterrupted(Exception):
    """A chunk failed. `completed`: the results of the calls that answered before it, in input
    order (those calls were committed); `error`: the failure. Retrying the rest is safe: schedules are
    upserts by key and carry the txns minted before the first attempt."""

    def __init__(self, completed: Sequence[Any], error: QueenError):
        super().__init__(f"{len(completed)} done, then: {error}")
        self.completed = list(completed)
        self.error = error


@dataclass(frozen=True)
class TimerRow:
    """One timer of `schedule_many`: `delay` ("15m", timedelta) or `at` (an aware datetime)."""

    key: str
    payload: Any
    delay: Duration | None = None
    at: datetime | None = None
    partition: str | None = None
    txn: str | None = None
    zstd: bool = False

    def __post_init__(self) -> None:
        if (self.delay is None) == (self.at is None):
            raise ValueError(f"timer row {self.key!r}: give exactly one of delay= and at=")


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


async def send_schedules(transport: Transport, ops: Sequence[dict[str, Any]],
                         chunk_size: int = MAX_TIMER_OPS_PER_CALL) -> list[TimerResult]:
    """Schedule ops, all built (their txns minted) before the first call, so a bad row fails before
    anything is sent and a retried chunk carries the same txns."""
    results: list[TimerResult] = []
    for chunk in _chunks(ops, chunk_size):
        try:
            answer = await transport.request("POST", "/api/v1/timers", json_body={"operations": list(chunk)})
        except QueenError as exc:
            raise BatchInterrupted(results, exc) from exc
        answered_at = local_ms()
        for op, wire in zip(chunk, answer.body["results"]):
            result = TimerResult.from_wire(wire)
            if result.deliver_at is not None:
                transport.group_clock.observe(op["delayMs"], result.deliver_at, answered_at)
            results.append(result)
    return results


async def ack_many(transport: Transport, messages: Sequence[Message], status: str = "completed",
                   error: str | None = None, chunk_size: int = MAX_ACKS_PER_CALL) -> list[AckResult]:
    """One verdict per message, in order; one call per lease (and chunk). A refused item is a
    verdict with `success` false, not an exception: the others of its call still settled."""
    for message in messages:
        if message.lease_id is None:
            raise ValueError(f"{message.queue} offset {message.offset} holds no lease (popped with auto_ack)")
    by_lease: dict[tuple[str, str | None], list[int]] = {}
    for position, message in enumerate(messages):
        assert message.lease_id is not None
        by_lease.setdefault((message.lease_id, message.consumer_group), []).append(position)
    verdicts: dict[int, AckResult] = {}
    for (lease_id, group), positions in by_lease.items():
        for chunk in _chunks(positions, chunk_size):
            body: dict[str, Any] = {"leaseId": lease_id,
                                    "acknowledgments": [messages[i].ack_item(status, error) for i in chunk]}
            if group is not None:
                body["consumerGroup"] = group
            try:
                answer = await transport.request("POST", "/api/v1/ack/batch", json_body=body)
            except QueenError as exc:
                raise BatchInterrupted([verdicts[i] for i in sorted(verdicts)], exc) from exc
            for i, wire in zip(chunk, answer.body["results"]):
                verdicts[i] = AckResult.from_wire(wire, retried=answer.maybe_applied_before)
    return [verdicts[i] for i in range(len(messages))]
