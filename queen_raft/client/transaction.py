"""`q.transaction().ack(msg).push(...).kv.put(...).timer(q).key(k).delay("15m").payload(p).schedule().commit()`

One call, one log entry, all or nothing. Every id the entry needs (push transactionIds, timer txns)
is fixed when the builder call is made, so a retried commit carries the same ones.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from queen_raft.client.consumer import Message
from queen_raft.client.durations import Duration, duration_seconds
from queen_raft.client.errors import OutcomeUnknown, TransactionRefused
from queen_raft.client.kv import expiry_fields, kv_op
from queen_raft.client.payloads import push_payload_fields
from queen_raft.client.results import (AckResult, KvEntry, PushResult, TimerResult, TransactionItemResult,
                                      TransactionResult)
from queen_raft.client.timers import TimerSetters, TimerSpec, mint_txn
from queen_raft.client.transport import Transport

# Reasons a retried commit gets when its first try was applied (its acks already settled, its
# pushes already in the dedup window, its putIfAbsent already written).
REASONS_AN_APPLIED_TRY_EXPLAINS = frozenset({"rejected_ack", "duplicate", "kv_precondition"})


class Transaction:
    def __init__(self, transport: Transport):
        self._transport = transport
        self.operations: list[dict] = []
        self.kv_ops: list[dict] = []
        self.timer_ops: list[dict] = []
        self.required_leases: list[str] = []
        self._idempotent = True
        self.group_clock = transport.group_clock

    def ack(self, message: Message, status: str = "completed", *, consumer_group: str | None = None,
            error: str | None = None) -> "Transaction":
        """Settles a popped message under its lease, in this transaction."""
        if message.lease_id is None:
            raise ValueError("this message holds no lease (popped with auto_ack): there is nothing to ack")
        op: dict[str, Any] = {"type": "ack", "leaseId": message.lease_id, **message.ack_item(status, error)}
        group = consumer_group if consumer_group is not None else message.consumer_group
        if group is not None:
            op["consumerGroup"] = group
        self.operations.append(op)
        return self

    def require_lease(self, message: Message | str) -> "Transaction":
        """The transaction commits only while this lease (a popped message's, or a leaseId) is still
        held and not expired; else it is refused `rejected_ack` and changes nothing."""
        lease_id = message if isinstance(message, str) else message.lease_id
        if lease_id is None:
            raise ValueError("this message holds no lease (popped with auto_ack): there is nothing to require")
        self.required_leases.append(lease_id)
        return self

    def push(self, queue: str, payload: Any, *, partition: str | None = None, txn: str | None = None,
             trace_id: str | None = None) -> "Transaction":
        op: dict[str, Any] = {"type": "push", "queue": queue, "transactionId": txn or mint_txn(),
                              **push_payload_fields(payload)}
        if partition is not None:
            op["partition"] = partition
        if trace_id is not None:
            op["traceId"] = trace_id
        self.operations.append(op)
        return self

    @property
    def kv(self) -> "TransactionKv":
        return TransactionKv(self)

    def timer(self, queue: str) -> "TransactionTimer":
        return TransactionTimer(self, TimerSpec(queue=queue))

    def wire_body(self) -> dict:
        body: dict[str, Any] = {}
        if self.operations:
            body["operations"] = list(self.operations)
        if self.kv_ops:
            body["kv"] = list(self.kv_ops)
        if self.timer_ops:
            body["timers"] = list(self.timer_ops)
        if self.required_leases:
            body["requiredLeases"] = list(self.required_leases)
        return body

    def _typed(self, wire: list[dict[str, Any]]) -> list[TransactionItemResult]:
        """Each result as the type of the op it answers: the index space is ours to read."""
        kinds = [op["type"] for op in self.operations] + ["kv"] * len(self.kv_ops) + ["timer"] * len(self.timer_ops)
        parse: dict[str, Callable[[dict[str, Any]], TransactionItemResult]] = {
            "push": PushResult.from_wire, "ack": AckResult.from_wire, "kv": KvEntry.from_wire,
            "timer": TimerResult.from_wire}
        return [parse[kind](item) for kind, item in zip(kinds, wire)]

    async def commit(self) -> TransactionResult:
        """TransactionRefused (rolled back whole, `reason` and `index`) or the results in one index
        space: operations, then kv, then timers."""
        answer = await self._transport.request("POST", "/api/v1/transaction", json_body=self.wire_body(),
                                               idempotent=self._idempotent)
        body = answer.body
        if body.get("success"):
            return TransactionResult(results=self._typed(body.get("results", [])), raw=body)
        reason = body.get("reason") or "refused"
        message = str(body.get("error") or reason)
        if answer.maybe_applied_before and reason in REASONS_AN_APPLIED_TRY_EXPLAINS:
            raise OutcomeUnknown(answer.status, reason, f"the commit was retried and then refused ({message}): "
                                 "its first try may have been applied", body=body)
        raise TransactionRefused(answer.status, reason, message, index=body.get("index"), body=body)


class TransactionKv:
    """`tx.kv.put(ns, key, value, ttl="7d")` and friends; each returns the transaction."""

    def __init__(self, transaction: Transaction):
        self._tx = transaction

    def _add(self, op: dict) -> Transaction:
        self._tx.kv_ops.append(op)
        return self._tx

    def put(self, ns: str, key: str, value: Any, ttl: Duration | None = None) -> Transaction:
        return self._add(kv_op("put", ns, key, value=value, **expiry_fields(ttl)))

    def put_if_absent(self, ns: str, key: str, value: Any, ttl: Duration | None = None) -> Transaction:
        return self._add(kv_op("putIfAbsent", ns, key, value=value, **expiry_fields(ttl)))

    def delete(self, ns: str, key: str) -> Transaction:
        return self._add(kv_op("delete", ns, key))

    def get(self, ns: str, key: str) -> Transaction:
        return self._add(kv_op("get", ns, key))

    def check(self, ns: str, key: str, expected_version: int | None) -> Transaction:
        """The transaction commits only if the key has this version (None: is absent)."""
        return self._add(kv_op("check", ns, key, expectedVersion=expected_version))

    def incr(self, ns: str, key: str, by: int = 1, ttl: Duration | None = None) -> Transaction:
        """Makes the commit non-idempotent: it is then not retried once it may have been applied."""
        self._tx._idempotent = False
        fields: dict[str, Any] = {"by": by}
        if ttl is not None:
            fields["ttlSeconds"] = duration_seconds(ttl)
        return self._add(kv_op("incr", ns, key, **fields))


class TransactionTimer(TimerSetters):
    """A timer op inside the transaction: `.schedule()` and `.cancel()` add it and return the
    transaction. A cancel here shares the transaction's fate: a rollback keeps the timer."""

    def __init__(self, transaction: Transaction, spec: TimerSpec):
        self._tx = transaction
        self.spec = spec

    def _with(self, **changes: Any) -> "TransactionTimer":
        return TransactionTimer(self._tx, replace(self.spec, **changes))

    def schedule(self) -> Transaction:
        self._tx.timer_ops.append(self.spec.schedule_op(clock=self._tx.group_clock))
        return self._tx

    def cancel(self, *, require_pending: bool = False) -> Transaction:
        """`require_pending=True`: the transaction commits only if this timer is still pending;
        otherwise it is refused whole (TransactionRefused, reason `timer_not_pending`, the index)
        and changes nothing. For a saga step that must not overwrite what the timer's fire did."""
        self._tx.timer_ops.append(replace(self.spec, require_pending=require_pending).cancel_op())
        return self._tx
