"""Typed answers. Each keeps the wire dict it came from in `raw`, so a field the server adds later
is never lost to a caller who needs it before this SDK names it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from queen_raft.client.payloads import stored_timer_payload


def _raw() -> Any:
    return field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class TimerResult:
    """A schedule or a cancel.

    A cancel that finds no pending timer says why: `fired` (the timer fired within the
    destination queue's dedup window: `txn`, `partition`, `offset`, `message_id` and `fired_at`
    name the message it put there; `txn` is the fired one, the one the request sent is
    `request_txn`), `dead_lettered` (its last failed fire filed it in the DLQ as `dlq_id`), or
    `absent` (never seen, or forgotten since: look for the txn in the destination partition,
    docs/sdk.md)."""

    ok: bool
    status: str  # scheduled | rescheduled | cancelled | fired | dead_lettered | absent | too_late
    queue: str
    timer_key: str
    txn: str | None
    message_id: str | None = None
    deliver_at: int | None = None  # ms since the epoch on the group clock
    partition: str | None = None
    offset: int | None = None  # where the fired message is, when status is fired
    fired_at: int | None = None  # ms since the epoch on the group clock
    dlq_id: str | None = None
    request_txn: str | None = None
    raw: dict = _raw()

    @property
    def fired(self) -> bool:
        return self.status == "fired"

    @property
    def dead_lettered(self) -> bool:
        return self.status == "dead_lettered"

    @classmethod
    def from_wire(cls, wire: dict) -> "TimerResult":
        return cls(ok=bool(wire.get("ok")), status=wire.get("status", ""), queue=wire.get("queue", ""),
                   timer_key=wire.get("timerKey", ""), txn=wire.get("txn"), message_id=wire.get("messageId"),
                   deliver_at=wire.get("deliverAt"), partition=wire.get("partition"), offset=wire.get("offset"),
                   fired_at=wire.get("firedAt"), dlq_id=wire.get("dlqId"), request_txn=wire.get("requestTxn"),
                   raw=wire)


@dataclass(frozen=True)
class TimerPeek:
    """A pending timer (`found`, status pending), or why there is none: `fired` or
    `dead_lettered` with where its message went (as TimerResult), or `absent`."""

    found: bool
    queue: str
    timer_key: str
    partition: str | None = None
    deliver_at: int | None = None
    due_at: int | None = None  # the next try: later than deliver_at while a failing fire backs off
    txn: str | None = None
    message_id: str | None = None
    payload_b64: str | None = None  # as stored: compressed when payload_zstd, ciphertext when encrypted
    payload_zstd: bool = False
    encrypted: bool = False
    producer_sub: str | None = None
    attempts: int = 0
    last_error: str | None = None
    created_at: int | None = None
    updated_at: int | None = None
    status: str = ""  # pending | fired | dead_lettered | absent
    offset: int | None = None
    fired_at: int | None = None
    dlq_id: str | None = None
    raw: dict = _raw()

    @property
    def fired(self) -> bool:
        return self.status == "fired"

    @property
    def dead_lettered(self) -> bool:
        return self.status == "dead_lettered"

    @property
    def payload(self) -> Any:
        """What the consumer will receive: decompressed, JSON-decoded when JSON; bytes otherwise or
        when encrypted (peek never decrypts)."""
        return stored_timer_payload(self.payload_b64, self.payload_zstd, self.encrypted)

    @classmethod
    def from_wire(cls, wire: dict) -> "TimerPeek":
        found = bool(wire.get("found"))
        return cls(found=found, queue=wire.get("queue", ""), timer_key=wire.get("timerKey", ""),
                   partition=wire.get("partition"), deliver_at=wire.get("deliverAt"), due_at=wire.get("dueAt"),
                   txn=wire.get("txn"), message_id=wire.get("messageId"), payload_b64=wire.get("payload"),
                   payload_zstd=bool(wire.get("payloadZstd")), encrypted=bool(wire.get("encrypted")),
                   producer_sub=wire.get("producerSub"), attempts=int(wire.get("attempts") or 0),
                   last_error=wire.get("lastError"), created_at=wire.get("createdAt"),
                   updated_at=wire.get("updatedAt"),
                   status=wire.get("status") or ("pending" if found else "absent"), offset=wire.get("offset"),
                   fired_at=wire.get("firedAt"), dlq_id=wire.get("dlqId"), raw=wire)


@dataclass(frozen=True)
class TimerPage:
    """One keyset page: rows (no payloads) in timerKey byte order; `next_after` continues it."""

    rows: list[TimerPeek]
    truncated: bool
    next_after: str | None
    raw: dict = _raw()

    @classmethod
    def from_wire(cls, wire: dict) -> "TimerPage":
        rows = [TimerPeek.from_wire({"found": True, **row}) for row in wire.get("rows", [])]
        return cls(rows=rows, truncated=bool(wire.get("truncated")), next_after=wire.get("nextAfter"), raw=wire)


@dataclass(frozen=True)
class PushResult:
    """status `queued`, or `duplicate` (the txn was already in the partition's dedup window: the
    original offset and messageId)."""

    status: str
    queue: str
    partition: str
    transaction_id: str
    message_id: str
    offset: int | None
    raw: dict = _raw()

    @classmethod
    def from_wire(cls, wire: dict) -> "PushResult":
        return cls(status=wire.get("status", ""), queue=wire.get("queue", ""), partition=wire.get("partition", ""),
                   transaction_id=wire.get("transactionId", ""), message_id=wire.get("messageId", ""),
                   offset=wire.get("offset"), raw=wire)


@dataclass(frozen=True)
class KvEntry:
    ns: str
    key: str
    found: bool
    value: Any = None
    version: int | None = None
    expires_at: int | None = None  # ms on the group clock; None: no expiry
    raw: dict = _raw()

    @classmethod
    def from_wire(cls, wire: dict, ns: str = "", key: str = "") -> "KvEntry":
        return cls(ns=wire.get("ns", ns), key=wire.get("key", key), found=bool(wire.get("found")),
                   value=wire.get("value"), version=wire.get("version"), expires_at=wire.get("expiresAt"), raw=wire)


@dataclass(frozen=True)
class AckResult:
    """One acknowledgment's verdict. `success` false: `error` says why (invalid_lease, ...).
    `retried`: an earlier try of its call may have been applied, so a refusal may mean that try
    settled it."""

    index: int
    success: bool
    error: str | None = None
    message: str | None = None
    dlq: bool = False  # the message went to its queue's dead-letter queue
    retried: bool = False
    raw: dict[str, Any] = _raw()

    @classmethod
    def from_wire(cls, wire: dict[str, Any], retried: bool = False) -> "AckResult":
        return cls(index=int(wire.get("index") or 0), success=bool(wire.get("success")), error=wire.get("error"),
                   message=wire.get("message"), dlq=bool(wire.get("dlq")), retried=retried, raw=wire)


TransactionItemResult = Union[PushResult, AckResult, KvEntry, TimerResult]


@dataclass(frozen=True)
class TransactionResult:
    """`results` in one index space: operations (push: PushResult, ack: AckResult), then kv
    (KvEntry), then timers (TimerResult)."""

    results: list[TransactionItemResult]
    raw: dict[str, Any] = _raw()


@dataclass(frozen=True)
class LeaseExtension:
    lease_id: str
    expires_at: int
    raw: dict = _raw()


@dataclass(frozen=True)
class DlqRow:
    """A dead-letter entry. A timer's row has consumer_group `__timer__`, offset -1 and its
    timer_key; replaying it is refused (409 dlq_replay_refused)."""

    dlq_id: str
    queue: str
    partition: str
    consumer_group: str | None
    offset: int
    transaction_id: str | None
    message_id: str | None
    payload_b64: str | None  # as stored, like a timer peek: never decrypted
    payload_zstd: bool
    encrypted: bool
    error: str | None
    attempts: int
    failed_at: int | None
    timer_key: str | None
    raw: dict = _raw()

    @property
    def payload(self) -> Any:
        return stored_timer_payload(self.payload_b64, self.payload_zstd, self.encrypted)

    @classmethod
    def from_wire(cls, wire: dict) -> "DlqRow":
        return cls(dlq_id=wire.get("dlqId", ""), queue=wire.get("queue", ""), partition=wire.get("partition", ""),
                   consumer_group=wire.get("consumerGroup"), offset=wire.get("offset", -1),
                   transaction_id=wire.get("transactionId"), message_id=wire.get("messageId"),
                   payload_b64=wire.get("payload"), payload_zstd=bool(wire.get("payloadZstd")),
                   encrypted=bool(wire.get("encrypted")), error=wire.get("error"),
                   attempts=int(wire.get("attempts") or 0), failed_at=wire.get("failedAt"),
                   timer_key=wire.get("timerKey"), raw=wire)


@dataclass(frozen=True)
class DlqPage:
    """One keyset page of dead letters in filing order; `next_after` (a dlqId) continues it."""

    rows: list[DlqRow]
    truncated: bool
    next_after: str | None
    raw: dict = _raw()

    @classmethod
    def from_wire(cls, wire: dict) -> "DlqPage":
        return cls(rows=[DlqRow.from_wire(row) for row in wire.get("rows", [])], truncated=bool(wire.get("truncated")),
                   next_after=wire.get("nextAfter"), raw=wire)
