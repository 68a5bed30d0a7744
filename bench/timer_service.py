"""What every system under test offers the scenarios: the same calls for us and for each peer.

A scenario holds a `TimerService` (servers it started, stopped by PID) and opens `TimerClient`s
from its picklable `endpoint`, in this process or in a consumer process, so that the load and the
measurement go through the same code path whatever answers behind it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Protocol

# Every scenario's timers carry this payload: small, like a reminder's id and a bit of context.
# Memory per timer is reported beyond it.
PAYLOAD = b'{"reminder":"bench","user":12345,"pad":"' + b"x" * 24 + b'"}'
PAYLOAD_B64 = base64.b64encode(PAYLOAD).decode("ascii")
QUEUE = "bench"


@dataclass(frozen=True)
class ScheduleOp:
    key: str
    delay_ms: int
    txn: str


@dataclass(frozen=True)
class Receipt:
    """A fired timer as the consumer got it: its txn and the instant the system fired it (ms)."""

    txn: str
    fired_at_ms: int


@dataclass(frozen=True)
class QueuedMessage:
    """A message taken by pop, with what its ack needs."""

    txn: str
    ack_handle: Any


class TimerClient(Protocol):
    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        """One call (one op or a batch, atomically); the deliverAt of each op in ms on the host clock."""

    async def consume(self, max_batch: int, wait_s: float) -> list[Receipt]:
        """Fired timers, waiting up to wait_s for the first one (a long poll)."""

    async def fired_log(self) -> list[Receipt]:
        """Every fired message (txn, fire instant), read back from where fires land (the log, the
        stream, the table), in the order they landed."""

    async def pending(self) -> int:
        """Timers scheduled and not fired yet."""

    async def push(self, txns: list[str]) -> None:
        """One call pushing a batch of messages."""

    async def pop(self, batch: int) -> list[QueuedMessage]:
        """Take up to batch messages under a lease (not acknowledged yet)."""

    async def ack(self, messages: list[QueuedMessage]) -> None:
        """Acknowledge messages taken by pop, in one call."""

    async def ack_then_pop(self, acked: list[QueuedMessage], batch: int) -> list[QueuedMessage]:
        """Acknowledge `acked` (the previous pop's messages; none on the first round), then take up
        to batch more, in the system's natural one round trip (each client says what that is)."""

    async def close(self) -> None: ...


class TimerService(Protocol):
    name: str
    endpoint: Any

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def pids(self) -> dict[str, int]:
        """The processes that do the work, by name (nodes, or the server and its poller)."""

    def client(self, concurrency: int = 1) -> TimerClient: ...
