"""Calls to the message routes (push, pop, ack, configure, fetch) and the consumer loop.

The history keeps what the checkers need from each answer (txns, offsets, verdicts), not payloads.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from jepsen.client import HistoryClient, Outcome
from jepsen.history import FAIL, INFO, OK
from jepsen.workloads import FinalReads

PARTITION = "Default"
# A lease the consumers lose (their ack was cut off) blocks the group until it expires; a short
# lease keeps a partition from stalling for the default 300 s after each lost ack.
CONSUMER_LEASE_TIME_S = 3
# Messages per pop: small, so one lost lease redelivers little and acks stay small entries.
POP_BATCH = 8
# How long one pop long-polls (ms, the route's unit). Short next to the client timeout.
POP_WAIT_MS = 1000
# A consumer whose pop failed waits this long before the next one, so a dead node is not hammered.
CONSUMER_BACKOFF_S = 0.2
# Records per fetch call while reading a partition back (the route caps limit at 1000).
FETCH_PAGE = 500
# Attempts at one fetch page in the final phase before the checker is told the read is partial.
FETCH_ATTEMPTS = 20
FETCH_RETRY_S = 0.5
# Attempts at configuring a queue at setup (the cluster may still be electing).
CONFIGURE_ATTEMPTS = 20


def _body(outcome: Outcome) -> Any:
    return outcome.body if isinstance(outcome.body, (dict, list)) else {}


def normalize_pop(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK:
        return outcome.type, outcome.answer
    body = _body(outcome)
    messages = body.get("messages") if isinstance(body, dict) else None
    kept = [
        {
            "txn": m.get("transactionId"),
            "offset": m.get("offset"),
            "partition": m.get("partition"),
            "attempt": m.get("deliveryAttempt"),
            "createdAt": m.get("createdAt"),
        }
        for m in (messages or [])
    ]
    return OK, {"status": outcome.status, "leaseId": body.get("leaseId") if isinstance(body, dict) else None,
                "messages": kept}


def normalize_ack(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK:
        return outcome.type, outcome.answer
    body = _body(outcome)
    return OK, {"status": outcome.status, "results": body.get("results", []) if isinstance(body, dict) else []}


def normalize_push(outcome: Outcome) -> tuple[str, dict]:
    """One item per call: its verdict decides the type (an `error` verdict appended nothing)."""
    if outcome.type != OK:
        return outcome.type, outcome.answer
    body = _body(outcome)
    results = body.get("results", []) if isinstance(body, dict) else []
    verdict = results[0] if results else {}
    type_ = OK if verdict.get("status") in ("queued", "duplicate") else FAIL
    return type_, {"status": outcome.status, "result": verdict}


async def configure_queue(client: HistoryClient, process: Any, queue: str, options: dict) -> bool:
    for attempt in range(CONFIGURE_ATTEMPTS):
        node = client.node_ids[attempt % len(client.node_ids)]
        type_, _ = await client.call(process, node, "configure", {"queue": queue, "options": options},
                                     "POST", "/api/v1/configure", {"queue": queue, "options": options})
        if type_ == OK:
            return True
        await asyncio.sleep(FETCH_RETRY_S)
    return False


async def push(client: HistoryClient, process: Any, node: str, queue: str, txn: str, payload: Any,
               f: str = "push") -> str:
    body = {"items": [{"queue": queue, "partition": PARTITION, "transactionId": txn, "payload": payload}]}
    type_, _ = await client.call(process, node, f, {"queue": queue, "txn": txn}, "POST", "/api/v1/push", body,
                                 normalize_push)
    return type_


async def fetch_log(client: HistoryClient, queue: str, nodes: list[str] | None = None,
                    partition: str = PARTITION) -> tuple[list[dict], str | None]:
    """The whole partition, by offset, through the linearizable fetch route, asking `nodes` in turn
    (every node by default).

    Returns the records and None, or what was read and why it stopped short.
    """
    records: list[dict] = []
    offset = 0
    ring = itertools.cycle(nodes or client.node_ids)
    while True:
        page = None
        for _ in range(FETCH_ATTEMPTS):
            node = next(ring)
            outcome = await client.nodes[node].request(
                "POST", "/api/v1/fetch", {"entries": [{"queue": queue, "partition": partition,
                                                       "offset": offset, "limit": FETCH_PAGE}]})
            if outcome.type == OK and isinstance(outcome.body, dict):
                page = outcome.body["entries"][0]["records"]
                break
            if outcome.status is not None and 400 <= outcome.status < 500:
                return records, f"fetch refused: {outcome.answer}"
            await asyncio.sleep(FETCH_RETRY_S)
        if page is None:
            return records, f"fetch at offset {offset} did not answer in {FETCH_ATTEMPTS} attempts"
        for record in page:
            records.append({
                "offset": record.get("offset"),
                "txn": record.get("transactionId"),
                "messageId": record.get("messageId"),
                "createdAt": record.get("createdAt"),
            })
        if len(page) < FETCH_PAGE:
            return records, None
        offset = records[-1]["offset"] + 1


async def read_back(client: HistoryClient, queue: str, final, partition: str = PARTITION,
                    name: str | None = None) -> None:
    """Reads the partition from any node into final.logs, and from each node on its own into
    final.replica_logs: every replica, after its read barrier, must hold the very same log.

    Both are keyed by `name` (the queue's name by default; a workload reading several partitions
    of one queue names each)."""
    name = name or queue
    records, problem = await fetch_log(client, queue, partition=partition)
    final.logs[name] = records
    if problem:
        final.notes.append(f"{name}: {problem}")
    final.replica_logs[name] = {}
    for node in client.node_ids:
        replica, replica_problem = await fetch_log(client, queue, [node], partition)
        final.replica_logs[name][node] = {"records": replica, "problem": replica_problem}


class Consumer:
    """A logical process that pops and acks one queue for one consumer group until stopped.

    After an `info` it becomes a new process (Jepsen's rule: the old one may still be in flight).
    An ack that ended `info` is sent once more, the same call from the new process on the next
    node, as a client that lost the answer would: it answers as the first did when the first was
    applied (or `invalid_lease` when the lease expired meanwhile), and the checkers hold either way
    (an ack answered `success` completed its messages by then, whichever attempt applied).
    """

    def __init__(self, client: HistoryClient, queue: str, group: str, first_process: int, process_stride: int,
                 node_index: int) -> None:
        self.client = client
        self.queue = queue
        self.group = group
        self.process = first_process
        self.process_stride = process_stride
        self.node_index = node_index
        self.stopped = asyncio.Event()

    def _crash(self) -> None:
        self.process += self.process_stride
        self.node_index += 1

    @property
    def node(self) -> str:
        return self.client.node_ids[self.node_index % len(self.client.node_ids)]

    async def run(self) -> None:
        path = (f"/api/v1/pop/queue/{self.queue}/partition/{PARTITION}?consumerGroup={self.group}"
                f"&batch={POP_BATCH}&wait=true&timeout={POP_WAIT_MS}")
        while not self.stopped.is_set():
            type_, answer = await self.client.call(self.process, self.node, "pop", {"queue": self.queue,
                                                   "group": self.group}, "GET", path, None, normalize_pop)
            if type_ == INFO:
                self._crash()
            if type_ != OK:
                await asyncio.sleep(CONSUMER_BACKOFF_S)
                continue
            messages = answer.get("messages") or []
            if not messages:
                continue
            if await self.ack(answer.get("leaseId"), messages) == INFO:
                self._crash()
                # The same ack once more, from the new process on the next node: a server that
                # applied the first answers it again (a retried ack), one that did not applies it.
                if await self.ack_batch(answer.get("leaseId"), messages, retry=True) == INFO:
                    self._crash()

    async def ack(self, lease_id: str | None, messages: list[dict]) -> str:
        """Acks a popped batch as completed; returns the call's type."""
        return await self.ack_batch(lease_id, messages)

    async def ack_batch(self, lease_id: str | None, messages: list[dict], retry: bool = False) -> str:
        """POST /api/v1/ack/batch for a popped batch, all completed; `retry` marks a second try."""
        items = [{"txn": m["txn"], "offset": m["offset"]} for m in messages]
        body = {
            "consumerGroup": self.group,
            "leaseId": lease_id,
            "acknowledgments": [{"partition": PARTITION, "offset": m["offset"], "status": "completed"}
                                for m in messages],
        }
        value = {"queue": self.queue, "group": self.group, "leaseId": lease_id, "items": items}
        type_, _ = await self.client.call(self.process, self.node, "ack", {**value, "retry": True} if retry else value,
                                          "POST", "/api/v1/ack/batch", body, normalize_ack)
        return type_


class PushWorkload:
    """What the queue and dedup workloads share: one queue, each planned op a push of its txn, and
    a final phase that only waits out the last push's commit, then reads the queue back.

    A subclass sets `queue`, and `final_margin_ms` if pushes need longer to settle."""

    queue: str
    # Pushes are small and immediate; nothing waits past the last one but the commit.
    final_margin_ms = 3000

    async def perform(self, client: HistoryClient, process: int, node: str, op) -> str:
        return await push(client, process, node, self.queue, op.value["txn"], {"txn": op.value["txn"]})

    def pending_deadline_wall_ms(self, operations: list, max_forward_skew_ms: int) -> int:
        last = max((op.complete_wall_ms or op.invoke_wall_ms for op in operations), default=0)
        return last + self.final_margin_ms

    async def final_reads(self, client: HistoryClient, process: Any, node: str) -> FinalReads:
        final = FinalReads()
        await read_back(client, self.queue, final)
        return final
