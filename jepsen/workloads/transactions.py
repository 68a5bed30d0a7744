"""The txn workload: POST /api/v1/transaction (pushes, KV and a timer op in one entry) under faults.

Each planned operation is one saga-like transaction T (see jepsen/transaction_checkers.py for what
it writes and how each effect is read back). Before sending it, the client reads T's counter
(GET /api/v1/kv, linearizable) and expects that version; a planned share of the operations expects
one version *less* than the read saw (versions only grow, so that check can never pass: those must
be refused with `kv_precondition`), and concurrent transactions on one counter refuse each other
the same way, so refusals happen under faults too. A transaction whose answer was `info` is sent
again, byte for byte: an attempt that did apply makes the retry a `duplicate` refusal. Every other
transaction sends its two pushes as one push of `items` (the shape of Queen 2.x clients).

Timer ops: `fire` (due within MAX_FIRE_DELAY_MS, read back from the destination log), `hold` (due
in HOLD_DELAY_MS, read back as pending), `release` (cancels the timer of the oldest acknowledged
hold nobody released yet, with requirePending; chosen when the operation runs, so the target is a
hold known to exist).
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
from collections import deque
from typing import Any

from jepsen.checkers import judged_on_partial_log
from jepsen.client import HistoryClient, Outcome
from jepsen.cluster import ORDERS_TENANT
from jepsen.history import FAIL, INFO, OK, FaultWindow, Operation
from jepsen.transaction_checkers import (FIRE, HOLD, LOG_A, LOG_B, LOG_FIRES, PARTITION_A, PARTITION_B, READ_F,
                                         RELEASE, TXN_F, check_transactions, fired_txn, op_key, push_txn)
from jepsen.workloads import ConsumerSpec, FinalReads, PlannedOp
from jepsen.workloads.messages import (FETCH_ATTEMPTS, FETCH_RETRY_S, PARTITION, configure_queue, read_back)

QUEUE = "jx"
FIRE_QUEUE = "jxt"
KV_NAMESPACE = "jx-bank"
# A few counters: transactions on one counter race (and refuse each other), and each counter's
# chain of versions still gets dozens of links in a minute.
COUNTERS = [f"c{i}" for i in range(3)]
# Share of transactions built to be refused: they expect a version older than the one just read.
STALE_FRACTION = 0.15
TIMER_WEIGHTS = {FIRE: 3, HOLD: 2, RELEASE: 1}
MAX_FIRE_DELAY_MS = 2000
# Far past any run (and past the largest clock skew the nemesis injects, 2^16 ms): a hold never
# fires during a run, so at the end it is pending unless a release cancelled it.
HOLD_DELAY_MS = 3_600_000
# A transaction whose answer was `info` is sent again this many times at most, each after this
# pause: a retry sent at once lands in the same election and is refused `no_leader` (an election
# takes 0.2-0.6 s, a redial 0.5 s), while one sent after it tells whether the first attempt applied
# (then it is a `duplicate`).
MAX_TXN_RETRIES = 2
TXN_RETRY_BACKOFF_S = 1.0
# Pushes are replayed with their txn: the dedup window must cover the whole run (the default, said
# explicitly). The destination of fires keeps none, so a double fire appends twice and shows.
QUEUE_OPTIONS = {"dedupWindowSeconds": 3600}
FIRE_QUEUE_OPTIONS = {"dedupWindowSeconds": 0}
# The final phase waits this long past the last instant a fire could be due (tick period, one
# election, the commit of the fire).
FINAL_MARGIN_MS = 5000
# Keys per KV read batch in the final phase (the route caps a batch at 1000 ops).
KV_READ_BATCH = 500
# Rows per timer list page in the final phase (the route's maximum).
TIMER_LIST_PAGE = 1000


def normalize_read(outcome: Outcome) -> tuple[str, dict]:
    if outcome.type != OK or not isinstance(outcome.body, dict):
        return outcome.type, outcome.answer
    return OK, {"status": outcome.status, "result": {k: outcome.body.get(k) for k in ("found", "version", "value")}}


def normalize_transaction(outcome: Outcome) -> tuple[str, dict]:
    """ok: `{pushes, kv, timer}` compacted from the results; a `success: false` answer is a `fail`
    (the entry committed and rolled back: nothing changed), with its reason."""
    body = outcome.body if isinstance(outcome.body, dict) else {}
    if outcome.type != OK:
        return outcome.type, outcome.answer
    if body.get("success") is False:
        return FAIL, {"status": outcome.status, "reason": body.get("reason"), "index": body.get("index"),
                      "error": str(body.get("error"))[:200]}
    results = body.get("results")
    if body.get("success") is not True or not isinstance(results, list) or len(results) != 6:
        return INFO, {"status": outcome.status, "unexpected_body": str(body)[:300]}
    return OK, {
        "status": outcome.status,
        "pushes": [{k: r.get(k) for k in ("partition", "transactionId", "status", "offset")} for r in results[:2]],
        "kv": [{k: r.get(k) for k in ("key", "found", "version")} for r in results[2:5]],
        "timer": {k: results[5].get(k) for k in ("status", "txn", "deliverAt", "timerKey")},
    }


def sends_items_shape(txn: str) -> bool:
    """Odd-numbered transactions push as Queen 2.x clients do, one push op holding both messages:
    the answer (a result per message, in order) and what the checker reads are the same."""
    return int(txn.lstrip("x")) % 2 == 1


def transaction_body(value: dict) -> dict:
    txn, counter, expected = value["txn"], value["counter"], value["expectedVersion"] or 0
    timer = value["timer"]
    if timer["kind"] == RELEASE:
        # The target is an acknowledged hold nobody released, due long after the run: it must be
        # pending, so a refusal with timer_not_pending is a finding (transaction_checkers.py).
        timer_op = {"op": "cancel", "queue": FIRE_QUEUE, "timerKey": timer["target"], "requirePending": True}
    else:
        payload = base64.b64encode(json.dumps({"txn": txn}).encode()).decode()
        timer_op = {"op": "schedule", "queue": FIRE_QUEUE, "timerKey": txn, "delayMs": timer["delayMs"],
                    "txn": fired_txn(txn), "payload": payload}
    pushes = [{"queue": QUEUE, "partition": partition, "transactionId": push_txn(txn, partition),
               "payload": {"txn": txn}} for partition in (PARTITION_A, PARTITION_B)]
    return {
        "operations": ([{"type": "push", "items": pushes}] if sends_items_shape(txn)
                       else [{"type": "push", **push} for push in pushes]),
        "kv": [{"op": "check", "ns": KV_NAMESPACE, "key": counter, "expectedVersion": value["expectedVersion"]},
               {"op": "put", "ns": KV_NAMESPACE, "key": counter, "value": {"n": expected + 1, "txn": txn}},
               {"op": "put", "ns": KV_NAMESPACE, "key": op_key(txn), "value": {"counter": counter, "prev": expected}}],
        "timers": [timer_op],
    }


class TransactionsWorkload:
    tenant = ORDERS_TENANT
    name = "txn"
    queues = [QUEUE, FIRE_QUEUE]

    def __init__(self) -> None:
        # txn -> the value its first attempt sent (retries send the same).
        self.prepared: dict[str, dict] = {}
        # The largest counter version any answer showed: the guess when a read does not answer.
        self.known_versions: dict[str, int] = {counter: 0 for counter in COUNTERS}
        # Acknowledged holds that no release has targeted yet, oldest first.
        self.releasable: deque[str] = deque()

    def plan(self, rng: random.Random, duration_s: float, rate: float) -> list[PlannedOp]:
        ops: list[PlannedOp] = []
        kinds = list(TIMER_WEIGHTS)
        weights = [TIMER_WEIGHTS[k] for k in kinds]
        at = 0.0
        while True:
            at += rng.expovariate(rate)
            if at >= duration_s:
                return ops
            kind = rng.choices(kinds, weights)[0]
            ops.append(PlannedOp(at, TXN_F, {
                "txn": f"x{len(ops)}", "counter": rng.choice(COUNTERS), "stale": rng.random() < STALE_FRACTION,
                "timer": kind, "delayMs": HOLD_DELAY_MS if kind == HOLD else rng.randint(0, MAX_FIRE_DELAY_MS),
                "retries": MAX_TXN_RETRIES,
            }))

    def consumers(self) -> list[ConsumerSpec]:
        return []

    async def setup(self, client: HistoryClient, process: Any) -> list[str]:
        notes = []
        for queue, options in ((QUEUE, QUEUE_OPTIONS), (FIRE_QUEUE, FIRE_QUEUE_OPTIONS)):
            if not await configure_queue(client, process, queue, options):
                notes.append(f"could not configure {queue} {options}")
        return notes

    def retry_on_info(self, op: PlannedOp) -> bool:
        return True

    async def _prepare(self, client: HistoryClient, process: int, node: str, planned: dict) -> dict:
        counter = planned["counter"]
        # The read asks another node than the transaction: a read stuck on a paused or cut-off node
        # would otherwise take every hit, and the transaction sent after it would find the fault over.
        node_ids = client.node_ids
        read_node = node_ids[(node_ids.index(node) + 1) % len(node_ids)]
        type_, answer = await client.call(process, read_node, READ_F, {"counter": counter}, "GET",
                                          f"/api/v1/kv/{KV_NAMESPACE}/{counter}", None, normalize_read)
        read = answer.get("result") if type_ == OK else None
        version = (read.get("version") or 0) if read else self.known_versions[counter]
        # Stale only after a read that answered: a guessed version may be stale or right.
        stale = bool(planned["stale"] and read and version >= 1)
        expected = version - 1 if stale else version
        kind, target = planned["timer"], None
        if kind == RELEASE:
            if self.releasable:
                target = self.releasable.popleft()
            else:
                kind = FIRE
        return {"txn": planned["txn"], "counter": counter, "readVersion": version if read else None,
                "stale": stale, "expectedVersion": expected or None,
                "timer": {"kind": kind, "delayMs": planned["delayMs"] if kind != RELEASE else None,
                          "target": target}}

    async def perform(self, client: HistoryClient, process: int, node: str, op: PlannedOp) -> str:
        txn = op.value["txn"]
        value = self.prepared.get(txn)
        if value is None:
            value = self.prepared[txn] = await self._prepare(client, process, node, op.value)
        else:
            await asyncio.sleep(TXN_RETRY_BACKOFF_S)
        type_, answer = await client.call(process, node, TXN_F, value, "POST", "/api/v1/transaction",
                                          transaction_body(value), normalize_transaction)
        if type_ == OK:
            counter_row = answer["kv"][1]
            self.known_versions[value["counter"]] = max(self.known_versions[value["counter"]],
                                                        counter_row.get("version") or 0)
            if value["timer"]["kind"] == HOLD:
                self.releasable.append(txn)
        return type_

    def pending_deadline_wall_ms(self, operations: list[Operation], max_forward_skew_ms: int) -> int:
        """The last instant a fire could be due (see TimersWorkload), and at least the last answer."""
        deadline = max((op.complete_wall_ms or op.invoke_wall_ms for op in operations), default=0)
        for op in operations:
            if op.f != TXN_F or op.type == FAIL or op.value["timer"]["kind"] != FIRE:
                continue
            deliver_at = ((op.answer or {}).get("timer") or {}).get("deliverAt") if op.type == OK else None
            if isinstance(deliver_at, int):
                deadline = max(deadline, deliver_at)
            else:
                stamped_by = op.complete_wall_ms if op.complete_wall_ms is not None else op.invoke_wall_ms
                deadline = max(deadline, stamped_by + max_forward_skew_ms + op.value["timer"]["delayMs"])
        return deadline + FINAL_MARGIN_MS

    async def _read_kv(self, client: HistoryClient, keys: list[str], state: dict) -> None:
        rows: dict[str, dict] = {}
        ring = client.node_ids
        for start in range(0, len(keys), KV_READ_BATCH):
            batch = keys[start:start + KV_READ_BATCH]
            ops = [{"op": "get", "ns": KV_NAMESPACE, "key": key} for key in batch]
            for attempt in range(FETCH_ATTEMPTS):
                outcome = await client.nodes[ring[attempt % len(ring)]].request("POST", "/api/v1/kv", {"ops": ops})
                if outcome.type == OK and isinstance(outcome.body, dict):
                    for row in outcome.body["results"]:
                        rows[row["key"]] = {k: row.get(k) for k in ("found", "value", "version")}
                    break
                await asyncio.sleep(FETCH_RETRY_S)
            else:
                state["problems"].append(f"kv: the batch from key {batch[0]} did not answer in {FETCH_ATTEMPTS} attempts")
        state["kv"] = rows

    async def _read_timers(self, client: HistoryClient, state: dict) -> None:
        rows: dict[str, dict] = {}
        ring = client.node_ids
        after = None
        while True:
            path = f"/api/v1/timers/{FIRE_QUEUE}?limit={TIMER_LIST_PAGE}" + (f"&after={after}" if after else "")
            for attempt in range(FETCH_ATTEMPTS):
                outcome = await client.nodes[ring[attempt % len(ring)]].request("GET", path)
                if outcome.type == OK and isinstance(outcome.body, dict):
                    break
                await asyncio.sleep(FETCH_RETRY_S)
            else:
                state["problems"].append(f"timers: the list after {after!r} did not answer in {FETCH_ATTEMPTS} attempts")
                break
            for row in outcome.body["rows"]:
                rows[row["timerKey"]] = {"txn": row.get("txn"), "deliverAt": row.get("deliverAt")}
            if not outcome.body.get("truncated"):
                break
            after = outcome.body["nextAfter"]
        state["timers"] = rows

    async def final_reads(self, client: HistoryClient, process: Any, node: str) -> FinalReads:
        final = FinalReads()
        await read_back(client, QUEUE, final, PARTITION_A, LOG_A)
        await read_back(client, QUEUE, final, PARTITION_B, LOG_B)
        await read_back(client, FIRE_QUEUE, final, PARTITION, LOG_FIRES)
        final.state = {"problems": []}
        await self._read_kv(client, COUNTERS + [op_key(txn) for txn in sorted(self.prepared)], final.state)
        await self._read_timers(client, final.state)
        final.notes += final.state["problems"]
        return final

    def check(self, operations: list[Operation], windows: list[FaultWindow], final: FinalReads) -> dict:
        complete = {name: not any(note.startswith(f"{name}:") for note in final.notes) for name in (LOG_A, LOG_B, LOG_FIRES)}
        state = final.state or {}
        results = check_transactions(operations, final.logs, final.replica_logs, state.get("kv", {}),
                                     state.get("timers", {}), COUNTERS, complete)
        if not all(complete.values()) or state.get("problems") or "kv" not in state or "timers" not in state:
            results = judged_on_partial_log(results)
        return results
