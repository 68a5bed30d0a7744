"""A consumer round in one call: the acknowledgments of the batch in hand ride the next pop
(`POST /api/v1/pop/...`, docs/api.md), so the server settles them and pops in one Raft entry, one
commit round instead of two.

`ack_and_pop` is the call; `consume_batches` the loop built on it: it yields one `Batch` per pop,
the caller settles the batch's messages on it (`batch.ack(m)`, `batch.nack(m, error)`, ...,
`batch.ack_rest()`), and when the loop asks for the next batch those settlements go with that pop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterator, Sequence, Union

from queen_raft.client.consumer import (
    ACK_STATUSES, DEFAULT_POLL_WAIT, Message, lease_kept, pop, pop_target,
)
from queen_raft.client.durations import Duration, duration_ms, duration_seconds
from queen_raft.client.results import AckResult
from queen_raft.client.transport import Transport

log = logging.getLogger(__name__)

# The server's cap of acknowledgments per call (the ack batch's).
MAX_ACKS_PER_POP = 1000


@dataclass(frozen=True)
class Settlement:
    """How one popped message is settled: `completed`, `failed` (spends a retry), `retry` (back
    to the queue, no retry spent) or `dlq`, with an optional error text."""

    message: Message
    status: str = "completed"
    error: str | None = None

    def __post_init__(self) -> None:
        if self.status not in ACK_STATUSES:
            raise ValueError(f"ack status {self.status!r} is not one of {', '.join(ACK_STATUSES)}")


Settle = Union[Message, Settlement]


@dataclass(frozen=True)
class PopRound:
    """What one `ack_and_pop` answered: the new messages (under `lease_id`), and one verdict per
    settlement sent, in the order given. A refused one (a lost lease: `invalid_lease`) is a
    verdict with `success` false: its message comes back when its lease expires."""

    messages: list[Message]
    acks: list[AckResult]
    lease_id: str | None = None


def _settlements(settle: Sequence[Settle]) -> list[Settlement]:
    return [s if isinstance(s, Settlement) else Settlement(s) for s in settle]


def _ack_body(settlements: list[Settlement], group: str | None) -> dict[str, Any]:
    """The body of one call settling messages of one lease and one consumer group."""
    leases = {s.message.lease_id for s in settlements}
    if len(leases) != 1 or None in leases:
        raise ValueError("one call settles the messages of one pop (one lease); use Queen.ack_many for several")
    groups = {s.message.consumer_group for s in settlements}
    if groups != {group}:
        raise ValueError(f"the messages were popped for consumer group {groups.pop()!r}, not {group!r}")
    if len(settlements) > MAX_ACKS_PER_POP:
        raise ValueError(f"at most {MAX_ACKS_PER_POP} acknowledgments ride one pop")
    return {"leaseId": leases.pop(),
            "acknowledgments": [s.message.ack_item(s.status, s.error) for s in settlements]}


async def ack_and_pop(transport: Transport, queue: str, settle: Sequence[Settle], *, group: str | None = None,
                      partition: str | None = None, batch: int = 1, wait: Duration | None = None,
                      auto_ack: bool = False) -> PopRound:
    """Settle `settle` (messages of one earlier pop of `group`: a Message is `completed`), then
    pop as `pop` does, in one call. With nothing to settle it is a plain pop."""
    settlements = _settlements(settle)
    if not settlements:
        messages = await pop(transport, queue, group=group, partition=partition, batch=batch, wait=wait,
                             auto_ack=auto_ack)
        return PopRound(messages, [], messages[0].lease_id if messages else None)
    body = _ack_body(settlements, group)
    target = pop_target(transport, queue, group, partition, batch, wait, auto_ack)
    answer = await transport.request("POST", target.path, params=target.params, json_body=body,
                                     timeout_s=target.timeout_s)
    wire = answer.body if isinstance(answer.body, dict) else {}
    messages = [Message.from_wire(m, queue, group, transport) for m in wire.get("messages", [])]
    acks = [AckResult.from_wire(v, retried=answer.maybe_applied_before) for v in wire.get("acknowledgments", [])]
    return PopRound(messages, acks, wire.get("leaseId"))


@dataclass
class Batch:
    """One pop's messages in `consume_batches`. Settle each on the batch; the settlements are sent
    with the next pop, when the loop asks for the next batch. A message left unsettled comes back
    when its lease expires. `previous_acks`: the verdicts of the settlements sent with this pop."""

    messages: list[Message]
    previous_acks: list[AckResult]
    _settled: dict[int, Settlement] = field(default_factory=dict, repr=False)
    _positions: dict[int, int] = field(default_factory=dict, repr=False)  # id(message) -> its place

    def __post_init__(self) -> None:
        self._positions = {id(m): i for i, m in enumerate(self.messages)}

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def settle(self, message: Message, status: str = "completed", error: str | None = None) -> None:
        """Record how `message` (one of this batch's) is settled; a later call for it replaces this one."""
        position = self._positions.get(id(message))
        if position is None or self.messages[position] is not message:
            raise ValueError(f"{message.queue} offset {message.offset} is not a message of this batch")
        self._settled[position] = Settlement(message, status, error)

    def ack(self, message: Message) -> None:
        self.settle(message, "completed")

    def nack(self, message: Message, error: str | None = None) -> None:
        self.settle(message, "failed", error)

    def retry(self, message: Message) -> None:
        self.settle(message, "retry")

    def dead_letter(self, message: Message, error: str | None = None) -> None:
        self.settle(message, "dlq", error)

    def ack_rest(self) -> None:
        """Every message not settled otherwise is `completed`."""
        for position, message in enumerate(self.messages):
            self._settled.setdefault(position, Settlement(message))

    def settlements(self) -> list[Settlement]:
        """What this batch sends with the next pop, in the batch's order."""
        return [self._settled[i] for i in sorted(self._settled)]


async def consume_batches(transport: Transport, queue: str, *, group: str | None = None, partition: str | None = None,
                          batch: int = 100, wait: Duration = DEFAULT_POLL_WAIT,
                          keep_lease: Duration | None = None) -> AsyncIterator[Batch]:
    """Yields one Batch per pop, forever (break out to stop). The settlements recorded on a batch
    ride the next pop: a round is one call and one entry. Settlements recorded on the last batch
    before leaving the loop are not sent (send them with `Queen.ack_many`, or let the lease
    expire). With `keep_lease`, the batch's lease is extended while it is handled, as `consume` does."""
    renew_s = None if keep_lease is None else duration_seconds(keep_lease)
    if renew_s is not None and renew_s < 1:
        raise ValueError("keep_lease must be at least 1s")
    if duration_ms(wait) <= 0:
        raise ValueError("consume_batches long-polls: give it a wait above 0")
    settle: list[Settlement] = []
    verdicts: list[AckResult] = []
    while True:
        answered = await ack_and_pop(transport, queue, settle, group=group, partition=partition, batch=batch, wait=wait)
        settle = []
        verdicts += answered.acks
        for verdict in answered.acks:
            if not verdict.success:
                log.warning("an acknowledgment of %s was refused (%s): its message comes back when its lease expires",
                            queue, verdict.error)
        if not answered.messages:
            continue
        current = Batch(answered.messages, verdicts)
        verdicts = []
        async with lease_kept(transport, answered.lease_id, renew_s):
            yield current
        settle = current.settlements()
