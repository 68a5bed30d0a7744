"""TenantState: one tenant's replicated value, the `apply` of each log entry, reads and snapshots.

Every command is validated whole (shape, then the checks that need state) before anything
changes; a refusal is `{"error", "message"}` (plus `index` when an item is to blame) and leaves
everything but the clock as it was. `apply` never raises: an unexpected exception is answered
`{"error": "internal", ...}` (every replica runs the same code on the same value, so they agree on
that too).

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- A command without an integer `now` is refused (`bad_request`) and does not move the clock.
- Errors of a malformed command: `timers_bad_request` for `timers`, `bad_request` for the others.
- `push` items are validated for shape first (one malformed item refuses the command); after that
  each item stands alone (`queued`, `duplicate` or `error`).
- A transaction maps its refusals to the reasons of docs/commands.md: an ack that does not resolve
  is `rejected_ack` (its message says "already settled as <status>" when it repeats an ack its
  lease already settled: see broker.py), and so is one whose `requiredLeases` holds a lease not
  alive (transaction.py); a push that is a duplicate (of the window or of an
  earlier push of the same transaction) `duplicate`; a push over the queue's payload limit or
  over its maxSize `too_large` (the `error` text names which); a malformed part `bad_request`.
  Its timers fire in the same entry when already due, after its pushes, acks and kv ops.
- The counters: `billedMessages` (each schedule/reschedule op, each push item whatever its
  verdict, the pushes of a transaction when it commits), `pushedMessages` (every message
  appended to a partition: push, fire, replay), `fired` by result.
- `snapshot` and `restore` pause the cyclic GC while they run (see `collector_paused`). A process
  that has just restored a million timers may want `gc.freeze()`: the next full collection would
  otherwise walk every timer once (~1 s); that is the raft layer's call, not the state's.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import IO, Iterator

from . import snapshot_codec
from .broker import Broker
from .command_args import clamp_limit, group_name, parse_policy
from .fire import FireTally, fire, fire_runs, fired_by_queue
from .fired_memory import FiredMemory, record_answer
from .invariants import check_tenant_state
from .kv import KvStore, validate_kv_op
from .limits import (
    DEFAULT_PARTITION,
    MAX_INSTANT_MS,
    MAX_LEASE_EXTEND_SECONDS,
    QUEUE_MODE_GROUP,
    FirePolicy,
)
from .message_items import validate_ack_item, validate_push_item
from .partition import MSG_CREATED_AT, MSG_ENCRYPTED, MSG_ID, MSG_PAYLOAD, MSG_PRODUCER_SUB, \
    MSG_TRACE_ID, MSG_TXN
from .push_rows import push_rows_command
from .refusal import Refusal, answer_bound, is_int, require
from .timer_ops import (CHECK_PAYLOAD_BOUND, apply_timer_ops, check_payload_bounds, check_quota,
                        check_required_pending, validate_timer_ops)
from .timers import TimerTable, peek_timer
from .transaction import check_required_leases, required_leases, resolve_acks, split_operations

FIRE_RESULTS = ("appended", "duplicate", "failed", "dlq")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic GC while millions of containers are built or walked.

    Without it every 700 new containers start a collection that walks the young ones, which
    more than doubles the time of a million-timer snapshot or restore. It changes nothing in the
    value built, only when garbage is collected.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class TenantState:
    # False while the entry being applied is one whose answer nobody reads (raft/replicated_state.py):
    # the schedule, push, pop and ack paths then leave out their per-row result maps. What the
    # state becomes never depends on it, only what apply returns.
    answering = True

    def __init__(self) -> None:
        self.clock = 0
        self.scheduling_paused = False
        self.timers = TimerTable()
        self.broker = Broker()
        self.kv = KvStore()
        # Where recent fires went, for cancels and peeks after them (fired_memory.py).
        self.fired_memory = FiredMemory()
        self.billed = 0
        self.fired = dict.fromkeys(FIRE_RESULTS, 0)
        self._handlers = {
            "timers": self._timers, "tick": self._tick, "push": self._push, "pop": self._pop,
            "ack": self._ack, "lease_extend": self._lease_extend, "configure": self._configure,
            "kv": self._kv, "transaction": self._transaction, "dlq_replay": self._dlq_replay,
            "admin": self._admin, "barrier": self._barrier,
        }

    # --- apply ------------------------------------------------------------------------------------

    def apply(self, command: dict) -> dict:
        try:
            if not isinstance(command, dict):
                return {"error": "bad_request", "message": "command must be a map"}
            now = command.get("now")
            if not is_int(now) or not 0 <= now <= MAX_INSTANT_MS:
                return {"error": "bad_request",
                        "message": f"now must be an integer in 0..{MAX_INSTANT_MS}"}
            if now > self.clock:
                self.clock = now
            handler = self._handlers.get(command.get("op"))
            if handler is None:
                return {"error": "bad_request", "message": f"unknown op {command.get('op')!r}"}
            return handler(command, self.clock)
        except Refusal as refusal:
            answer = {"error": refusal.code, "message": refusal.message}
            if refusal.index is not None:
                answer["index"] = refusal.index
            return answer
        except Exception as exc:  # a bug: answer it, never raise out of a replicated method
            return {"error": "internal", "message": f"{type(exc).__name__}: {exc}"}

    # --- timers -----------------------------------------------------------------------------------

    def _timers(self, command: dict, now: int) -> dict:
        ops = validate_timer_ops(command.get("ops"))
        self._refuse_schedules_while_paused(ops)
        policy = parse_policy(command.get("policy"), "timers_bad_request")
        producer_sub = command.get("producerSub")
        require(producer_sub is None or isinstance(producer_sub, str), "timers_bad_request",
                "producerSub must be a string")
        if command.get(CHECK_PAYLOAD_BOUND) is True:
            check_payload_bounds(self.broker.queues, ops)
        check_quota(self.timers, ops, command.get("maxPending"))
        results = self._apply_timer_ops(ops, producer_sub, policy, now)
        return {"results": results}

    def _refuse_schedules_while_paused(self, ops: list[dict]) -> None:
        """An operator's pause holds in log order: every schedule ordered after the pause entry is
        refused here, whichever node proposed it. The API's gate reads its own replica, which may
        not have applied the pause yet (a follower a few ms behind); this check is what makes an
        acknowledged pause refuse the very next schedule. Cancels pass, as docs/spec.md section 2 says."""
        if self.scheduling_paused and any(op["op"] != "cancel" for op in ops):
            raise Refusal("timers_disabled", "an operator paused timer scheduling for this tenant")

    def _apply_timer_ops(self, ops: list[dict], producer_sub: str | None, policy: FirePolicy,
                         now: int) -> list[dict]:
        results, due_now, billed = apply_timer_ops(self.timers, ops, producer_sub, now,
                                                   self.fired_memory, self.answering)
        self.billed += billed
        if due_now:
            self._count(fire(self.timers.take(due_now), self.timers, self.broker, policy, now,
                             self.fired_memory))
        return results

    def _count(self, tally: FireTally) -> None:
        fired = self.fired
        fired["appended"] += tally.appended
        fired["duplicate"] += tally.duplicate
        fired["failed"] += tally.failed
        fired["dlq"] += tally.dlq

    def _tick(self, command: dict, now: int) -> dict:
        policy = parse_policy(command.get("policy"), "bad_request")
        table = self.timers
        runs = table.take_due_runs(now, policy.fire_batch, policy.fire_max_bytes)
        tally = fire_runs(runs, table, self.broker, policy, now, self.fired_memory)
        self._count(tally)
        next_due = table.next_due_at()
        # Fires (any result) by queue, for the leader's per-queue meter.
        return {"fired": tally.fired, "appended": tally.appended, "duplicate": tally.duplicate,
                "failed": tally.failed, "dlq": tally.dlq, "lagsMs": tally.lags,
                "firedByQueue": fired_by_queue(runs),
                "moreDue": next_due is not None and next_due <= now, "nextDueAt": next_due}

    # --- messages ---------------------------------------------------------------------------------

    def _push(self, command: dict, now: int) -> dict:
        if "rows" in command:  # the rows form (push_rows.py); entries without it hold items
            return push_rows_command(self, command, now)
        items = command.get("items")
        require(isinstance(items, list), "bad_request", "items must be a list")
        for index, item in enumerate(items):
            validate_push_item(item, index)
        producer_sub = command.get("producerSub")
        require(producer_sub is None or isinstance(producer_sub, str), "bad_request",
                "producerSub must be a string")
        if self.answering:
            results = [self.broker.push_item(item, index, producer_sub, now)
                       for index, item in enumerate(items)]
        else:
            results = []  # the same pushes, without a result map per item
            push = self.broker.push_message
            for item in items:
                push(item["queue"], item.get("partition", DEFAULT_PARTITION), item["transactionId"],
                     item["messageId"], item["payload"], producer_sub, item.get("traceId"),
                     item.get("encrypted", False), now)
        self.billed += len(items)
        return {"results": results}

    def _pop(self, command: dict, now: int) -> dict:
        queue = command.get("queue")
        require(isinstance(queue, str), "bad_request", "queue must be a string")
        partition = command.get("partition")
        require(partition is None or isinstance(partition, str), "bad_request",
                "partition must be a string")
        batch = command.get("batch", 1)
        require(is_int(batch) and batch >= 1, "bad_request", "batch must be a positive integer")
        auto_ack = command.get("autoAck", False)
        require(isinstance(auto_ack, bool), "bad_request", "autoAck must be a boolean")
        lease_id = command.get("leaseId")
        require(isinstance(lease_id, str) or auto_ack, "bad_request", "leaseId must be a string")
        # A remembered released lease's id too: its retried acks must keep meaning that lease.
        require(lease_id is None or (lease_id not in self.broker.leases
                                     and self.broker.released.get(lease_id) is None),
                "bad_request", "leaseId already in use")
        return self.broker.pop(queue, partition, group_name(command.get("consumerGroup")), batch,
                               lease_id, auto_ack, now, answer_bound(command.get("maxBytes")), self.answering)

    def _ack(self, command: dict, now: int) -> dict:
        items = command.get("acknowledgments")
        require(isinstance(items, list), "bad_request", "acknowledgments must be a list")
        for index, item in enumerate(items):
            validate_ack_item(item, index)
        lease_id = command.get("leaseId")
        require(lease_id is None or isinstance(lease_id, str), "bad_request",
                "leaseId must be a string")
        group = group_name(command.get("consumerGroup"))
        return {"results": self.broker.ack(group, lease_id, items, now, self.answering)}

    def _lease_extend(self, command: dict, now: int) -> dict:
        lease_id, seconds = command.get("leaseId"), command.get("seconds")
        require(isinstance(lease_id, str), "bad_request", "leaseId must be a string")
        require(is_int(seconds) and 1 <= seconds <= MAX_LEASE_EXTEND_SECONDS, "bad_request",
                "seconds must be a positive integer")
        return self.broker.extend(lease_id, seconds, now)

    def _configure(self, command: dict, now: int) -> dict:
        queue = command.get("queue")
        require(isinstance(queue, str) and queue != "", "bad_request", "queue must be a string")
        mode = command.get("mode", "merge")
        require(mode in ("merge", "replace"), "bad_request", "mode must be merge or replace")
        return self.broker.configure(queue, command.get("options"), mode)

    def _dlq_replay(self, command: dict, now: int) -> dict:
        dlq_id, message_id = command.get("dlqId"), command.get("messageId")
        require(isinstance(dlq_id, str) and isinstance(message_id, str), "bad_request",
                "dlqId and messageId must be strings")
        return self.broker.dlq_replay(dlq_id, message_id, now)

    # --- kv, transaction, admin ---------------------------------------------------------------

    def _kv(self, command: dict, now: int) -> dict:
        ops = command.get("ops")
        require(isinstance(ops, list), "bad_request", "ops must be a list")
        for index, op in enumerate(ops):
            validate_kv_op(op, index)
        overlay, results = self.kv.plan(ops, now, 0, answer_bound(command.get("maxAnswerBytes")))
        self.kv.prune(now)
        self.kv.commit(overlay)
        return {"results": results}

    def _transaction(self, command: dict, now: int) -> dict:
        try:
            return self._run_transaction(command, now)
        except Refusal as refusal:
            reason = refusal.code
            if reason == "timers_bad_request":
                reason = "bad_request"
            answer = {"success": False, "reason": reason, "error": refusal.message}
            if refusal.index is not None:
                answer["index"] = refusal.index
            return answer

    def _run_transaction(self, command: dict, now: int) -> dict:
        operations = command.get("operations", [])
        kv_ops = command.get("kv", [])
        timer_ops = command.get("timers", [])
        require(isinstance(operations, list) and isinstance(kv_ops, list), "bad_request",
                "operations and kv must be lists")
        producer_sub = command.get("producerSub")
        require(producer_sub is None or isinstance(producer_sub, str), "bad_request",
                "producerSub must be a string")
        policy = parse_policy(command.get("policy"), "bad_request")
        pushes, push_indexes, acks = split_operations(operations)
        required = required_leases(command)
        kv_base = len(operations)
        for index, op in enumerate(kv_ops):
            validate_kv_op(op, kv_base + index)
        timer_base = kv_base + len(kv_ops)
        validate_timer_ops(timer_ops, "bad_request", timer_base)
        self._refuse_schedules_while_paused(timer_ops)

        # State checks, in the order of the reasons: nothing has changed yet.
        try:
            self.broker.check_pushes(pushes, now)
        except Refusal as refusal:
            refusal.index = push_indexes[refusal.index]
            raise
        check_required_leases(self.broker, required, now)
        resolved = resolve_acks(self.broker, acks, now)
        overlay, kv_results = self.kv.plan(kv_ops, now, kv_base, answer_bound(command.get("maxAnswerBytes")))
        check_required_pending(self.timers, timer_ops, timer_base)
        if command.get(CHECK_PAYLOAD_BOUND) is True:
            check_payload_bounds(self.broker.queues, timer_ops, timer_base)
        check_quota(self.timers, timer_ops, command.get("maxPending"))

        # Apply: none of this can refuse any more.
        results: list[dict | None] = [None] * len(operations)
        for position, index in enumerate(push_indexes):
            results[index] = self.broker.push_item(operations[index], index, producer_sub, now)
        self.billed += len(push_indexes)
        for index, (lease, offset), operation in resolved:
            filed = self.broker.settle(lease, offset, operation["status"], operation.get("error"),
                                       now)
            results[index] = {"index": index, "success": True, "dlq": filed}
        self.kv.prune(now)
        self.kv.commit(overlay)
        timer_results = self._apply_timer_ops(timer_ops, producer_sub, policy, now)
        return {"success": True, "results": [*results, *kv_results, *timer_results]}

    def _admin(self, command: dict, now: int) -> dict:
        action = command.get("action")
        require(action in ("pause", "resume"), "bad_request", "action must be pause or resume")
        self.scheduling_paused = action == "pause"
        return {"paused": self.scheduling_paused}

    def _barrier(self, command: dict, now: int) -> dict:
        return {}

    # --- reads (never change state) -------------------------------------------------------------

    def next_due_at(self) -> int | None:
        return self.timers.next_due_at()

    def peek_timer(self, queue: str, timer_key: str) -> dict | None:
        timer = self.timers.get(queue, timer_key)
        return None if timer is None else peek_timer(timer)

    def fired_timer(self, queue: str, timer_key: str) -> dict | None:
        """Where the key's last fire went (`status` fired or dead_lettered, txn, partition,
        offset or dlqId, messageId, firedAt) while the state remembers it, else None; a pending
        timer of the key answers first (`peek_timer`)."""
        record = self.fired_memory.find(queue, timer_key, self.clock)
        return None if record is None else record_answer(record)

    def list_timers(self, queue: str, after: str | None = None, limit: int | None = None,
                    prefix: str | None = None) -> dict:
        return self.timers.list(queue, after, clamp_limit(limit), prefix)

    def fetch(self, queue: str, partition: str = DEFAULT_PARTITION, offset: int = 0,
              limit: int | None = None) -> list[dict]:
        found = self.broker.queues.get(queue)
        part = None if found is None else found.partitions.get(partition)
        if part is None:
            return []
        start = max(offset, part.base)
        records = []
        for position in range(start, min(part.end, start + clamp_limit(limit))):
            message = part.message(position)
            records.append({"offset": position, "transactionId": message[MSG_TXN],
                            "messageId": message[MSG_ID], "payload": message[MSG_PAYLOAD],
                            "createdAt": message[MSG_CREATED_AT],
                            "producerSub": message[MSG_PRODUCER_SUB],
                            "traceId": message[MSG_TRACE_ID], "encrypted": message[MSG_ENCRYPTED]})
        return records

    def dlq_list(self, queue: str | None = None, limit: int | None = None) -> list[dict]:
        return self.dlq_page(queue, None, limit)["rows"]

    def dlq_page(self, queue: str | None = None, after_seq: int | None = None, limit: int | None = None,
                 max_bytes: int | None = None) -> dict:
        """`{rows, truncated, nextAfter}` in filing order, after the row `dlq-<after_seq>` (which may be gone);
        with `max_bytes`, the page ends before the row whose payload would pass it (at least one row)."""
        return self.broker.dlq_rows(queue, after_seq or 0, clamp_limit(limit), max_bytes)

    def kv_get(self, ns: str, key: str) -> dict | None:
        return self.kv.get(ns, key, self.clock)

    def check_invariants(self) -> None:
        """Raises InvariantViolation unless every index and counter agrees (invariants.py). O(n):
        for tests, never on the apply path."""
        check_tenant_state(self)

    def counters(self) -> dict:
        return {"pendingTimers": self.timers.count, "billedMessages": self.billed,
                "pushedMessages": self.broker.pushed, "fired": dict(self.fired)}

    def deliverable(self, queue: str, partition: str | None = None,
                    consumer_group: str | None = None) -> bool:
        group = QUEUE_MODE_GROUP if consumer_group is None else consumer_group
        return self.broker.deliverable(queue, partition, group, self.clock)

    def queue_options(self, queue: str) -> dict | None:
        found = self.broker.queues.get(queue)
        return None if found is None else dict(found.options)

    # --- snapshot (snapshot_codec.py) -------------------------------------------------------------

    def snapshot_chunks(self) -> Iterator[bytes]:
        """The snapshot bytes in chunks, encoded as they are pulled: no copy of the whole is held.
        The bytes depend only on the entries applied (every map is sorted)."""
        with collector_paused():
            yield from snapshot_codec.compressed_chunks(snapshot_codec.msgpack_pieces(self, FIRE_RESULTS))

    def write_snapshot(self, output: IO[bytes]) -> None:
        for chunk in self.snapshot_chunks():
            output.write(chunk)

    def snapshot(self) -> bytes:
        """msgpack + zstd (snapshot_codec.py), whole."""
        return b"".join(self.snapshot_chunks())

    @classmethod
    def restore(cls, data: bytes | list[bytes]) -> TenantState:
        """The state of a snapshot, given whole or as the list of its chunks."""
        with collector_paused():
            return cls._restore(snapshot_codec.unpack_wire(data))

    @classmethod
    def _restore(cls, wire: list) -> TenantState:
        version, clock, paused, billed, fired, timers, broker, kv, *rest = wire
        state = cls()
        state.clock = clock
        state.scheduling_paused = paused
        state.billed = billed
        state.fired = dict(zip(FIRE_RESULTS, fired))
        state.timers = TimerTable.from_wire(timers, version)
        state.broker = Broker.from_wire(broker)
        state.kv = KvStore.from_wire(kv)
        # A format-1 snapshot was written before fires were remembered: it remembers none.
        state.fired_memory = FiredMemory.from_wire(rest[0] if rest else [])
        return state
