"""The timers workload: random schedule / reschedule / cancel / peek on a few keys, consumers popping.

Keys are `t<k>`; each schedule of key k mints txn `t<k>-<version>`, so every txn names exactly one
schedule call and one key. Cancels go to the DELETE route without `?txn=`, so an acknowledged
cancel names the txn it removed. A share of schedules and cancels go through the transaction route
instead, and the consumers ack some batches in a transaction that also cancels a timer
(timer_transactions.py). Consumers pop and ack the destination queue throughout, which is how the
checker sees *when* a fire became visible.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

from jepsen.checkers import check_replicas_agree, judged_on_partial_log
from jepsen.client import HistoryClient, Outcome
from jepsen.cluster import TENANT
from jepsen.history import FAIL, OK, FaultWindow, Operation
from jepsen.queue_checkers import check_queue_consumption
from jepsen.timer_checkers import check_timers
from jepsen.workloads import ConsumerSpec, FinalReads, PlannedOp, log_complete as _log_complete
from jepsen.workloads.messages import CONSUMER_LEASE_TIME_S, configure_queue, read_back
from jepsen.workloads.timer_transactions import TRANSACTION_PATH, AckCancelConsumer, normalized_at

QUEUE = "jt"
CONSUMER_GROUP = "timers-consumers"
CONSUMERS = 2
# Few keys, so operations on one key overlap and race (cancel against fire, reschedule against
# fire); enough keys that the per-key linearizability search stays small.
KEY_COUNT = 12
MAX_DELAY_MS = 3000
# The mix of a timers run: schedules dominate so timers are pending most of the time.
OP_WEIGHTS = {"schedule": 5, "cancel": 2, "peek": 3}
# Share of the planned schedules and cancels sent through POST /api/v1/transaction.
TRANSACTION_SHARE = 0.3
# The final phase waits this long past the last instant a timer could be due, to cover the tick
# period, one election and the commit of the fire.
FINAL_MARGIN_MS = 5000
# Final peeks per key: retried while the cluster answers 503, each a recorded operation, this far
# apart (an election takes up to ~2 s after a restart).
FINAL_PEEK_ATTEMPTS = 10
FINAL_PEEK_RETRY_S = 0.5


def _first_result(outcome: Outcome) -> dict:
    body = outcome.body
    results = body.get("results") if isinstance(body, dict) else body
    return results[0] if isinstance(results, list) and results and isinstance(results[0], dict) else {}


def normalize_schedule(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK:
        return outcome.type, outcome.answer
    result = _first_result(outcome)
    if result.get("status") not in ("scheduled", "rescheduled"):
        return FAIL, {"status": outcome.status, "result": result}
    return OK, {"status": outcome.status, "result": {k: result.get(k) for k in
                                                      ("ok", "status", "txn", "messageId", "deliverAt")}}


# A cancel's answers, and what the history keeps of them: `fired` names where the message went.
CANCEL_STATUSES = ("cancelled", "absent", "fired", "dead_lettered")
CANCEL_FIELDS = ("ok", "status", "txn", "partition", "offset", "messageId", "dlqId")
PEEK_FIELDS = ("found", "status", "txn", "deliverAt", "messageId", "attempts", "partition", "offset", "dlqId")


def normalize_cancel(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK:
        return outcome.type, outcome.answer
    body = outcome.body if isinstance(outcome.body, dict) else {}
    result = body if "status" in body else _first_result(outcome)
    if result.get("status") not in CANCEL_STATUSES:
        return FAIL, {"status": outcome.status, "result": result}
    return OK, {"status": outcome.status, "result": {k: result.get(k) for k in CANCEL_FIELDS}}


def normalize_peek(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK:
        return outcome.type, outcome.answer
    body = outcome.body if isinstance(outcome.body, dict) else {}
    return OK, {"status": outcome.status, "result": {k: body.get(k) for k in PEEK_FIELDS}}


class TimersWorkload:
    name = "timers"
    tenant = TENANT
    queue = QUEUE
    # No dedup window on the destination: a timer that fired twice would otherwise append once
    # (the second fire is a dedup "duplicate") and the at-most-once check could not see it.
    dedup_window_s = 0

    @property
    def queues(self) -> list[str]:
        return [self.queue]

    def plan(self, rng: random.Random, duration_s: float, rate: float) -> list[PlannedOp]:
        versions = [0] * KEY_COUNT
        ops: list[PlannedOp] = []
        kinds = list(OP_WEIGHTS)
        weights = [OP_WEIGHTS[k] for k in kinds]
        at = 0.0
        while True:
            at += rng.expovariate(rate)
            if at >= duration_s:
                return ops
            k = rng.randrange(KEY_COUNT)
            kind = rng.choices(kinds, weights)[0]
            key = f"t{k}"
            through_transaction = kind != "peek" and rng.random() < TRANSACTION_SHARE
            if kind == "schedule":
                versions[k] += 1
                value = {
                    "key": key,
                    "txn": f"{key}-{versions[k]}",
                    "delayMs": rng.randint(0, MAX_DELAY_MS),
                    # schedule and reschedule are the same upsert; both words are sent.
                    "op": rng.choice(("schedule", "reschedule")),
                }
            else:
                value = {"key": key}
            if through_transaction:
                value["via"] = "txn"
            ops.append(PlannedOp(at, kind, value))

    def consumers(self) -> list[ConsumerSpec]:
        def consumer(*args, **kwargs) -> AckCancelConsumer:
            return AckCancelConsumer(*args, timer_queue=self.queue, normalize_cancel=normalize_cancel,
                                     key_count=KEY_COUNT, **kwargs)
        return [ConsumerSpec(self.queue, CONSUMER_GROUP, CONSUMERS, consumer)]

    async def setup(self, client: HistoryClient, process: Any) -> list[str]:
        options = {"leaseTime": CONSUMER_LEASE_TIME_S, "dedupWindowSeconds": self.dedup_window_s}
        ok = await configure_queue(client, process, self.queue, options)
        return [] if ok else [f"could not configure {self.queue} {options}: a lost ack blocks the consumer group "
                              "until the default lease expires, and the dedup window can hide a double fire"]

    async def perform(self, client: HistoryClient, process: int, node: str, op: PlannedOp) -> str:
        value = op.value
        key = value["key"]
        if op.f == "schedule":
            payload = base64.b64encode(json.dumps({"txn": value["txn"]}).encode()).decode()
            timer_op = {"op": value["op"], "queue": self.queue, "timerKey": key,
                        "delayMs": value["delayMs"], "txn": value["txn"], "payload": payload}
            if value.get("via") == "txn":
                type_, _ = await client.call(process, node, "schedule", value, "POST", TRANSACTION_PATH,
                                             {"timers": [timer_op]}, normalized_at(normalize_schedule, 0))
            else:
                type_, _ = await client.call(process, node, "schedule", value, "POST", "/api/v1/timers",
                                             {"operations": [timer_op]}, normalize_schedule)
        elif op.f == "cancel" and value.get("via") == "txn":
            # No txn in the cancel: a `cancelled` answer then names the txn it removed.
            body = {"timers": [{"op": "cancel", "queue": self.queue, "timerKey": key}]}
            type_, _ = await client.call(process, node, "cancel", value, "POST", TRANSACTION_PATH, body,
                                         normalized_at(normalize_cancel, 0))
        elif op.f == "cancel":
            type_, _ = await client.call(process, node, "cancel", value, "DELETE",
                                         f"/api/v1/timers/{self.queue}/{key}", None, normalize_cancel)
        else:
            type_, _ = await client.call(process, node, "peek", value, "GET",
                                         f"/api/v1/timers/{self.queue}/{key}", None, normalize_peek)
        return type_

    def retry_on_info(self, op: PlannedOp) -> bool:
        return False

    def pending_deadline_wall_ms(self, operations: list[Operation], max_forward_skew_ms: int) -> int:
        """The last instant (harness wall clock) any possibly-applied schedule could be due.

        A known deliverAt is on the group clock, which runs at most max_forward_skew_ms ahead of
        ours; an info schedule's entry was stamped before its completion (or, never completed, by
        now), so its deliverAt is at most that stamp + the forward skew + its delay.
        """
        deadline = 0
        for op in operations:
            if op.f != "schedule" or op.type == FAIL:
                continue
            result = (op.answer or {}).get("result") or {}
            if op.type == OK and isinstance(result.get("deliverAt"), int):
                deadline = max(deadline, result["deliverAt"])
            else:
                stamped_by = op.complete_wall_ms if op.complete_wall_ms is not None else op.invoke_wall_ms
                deadline = max(deadline, stamped_by + max_forward_skew_ms + int(op.value["delayMs"]))
        return deadline + FINAL_MARGIN_MS if deadline else 0

    async def final_reads(self, client: HistoryClient, process: Any, node: str) -> FinalReads:
        final = FinalReads()
        for k in range(KEY_COUNT):
            key = f"t{k}"
            for attempt in range(FINAL_PEEK_ATTEMPTS):
                target = client.node_ids[(attempt + k) % len(client.node_ids)]
                type_, _ = await client.call(process, target, "peek", {"key": key, "final": True}, "GET",
                                             f"/api/v1/timers/{self.queue}/{key}", None, normalize_peek)
                if type_ == OK:
                    break
                await asyncio.sleep(FINAL_PEEK_RETRY_S)
            else:
                final.notes.append(f"final peek of {key} never answered")
        await read_back(client, self.queue, final)
        return final

    def check(self, operations: list[Operation], windows: list[FaultWindow], final: FinalReads) -> dict:
        results = check_timers(operations, final.logs.get(self.queue, []), windows, self.queue,
                               log_complete=_log_complete(final))
        results.update(check_queue_consumption(operations, final.logs.get(self.queue, []), self.queue))
        results["replicas_agree"] = check_replicas_agree(final.replica_logs.get(self.queue, {}), self.queue)
        return results if _log_complete(final) else judged_on_partial_log(results)


class RememberedTimersWorkload(TimersWorkload):
    """The timers workload on a queue with the default dedup window, so the state remembers each
    fire and cancels and peeks after it answer `fired` (judged by fired_answers_name_the_log and the
    per-key linearizability). The window would hide a second fire of a txn as a dedup duplicate, so
    at_most_once is the plain workload's to judge, not this one's."""

    name = "timers-remembered"
    queue = "jtr"
    dedup_window_s = 3600

