"""A large state under the faults: timers preloaded before the run, read back after the final phase.

The README promises that nothing acknowledged is lost when one node or all three are killed. A small
state is written (snapshotted) in milliseconds, so a fault rarely meets a snapshot in flight; a state
of a million pending timers takes seconds to write, which is when a kill or a stop can race the
snapshot writer. So a run may start by scheduling `count` timers in queue `jpre` through the batched
route (OPS_PER_CALL schedules per call, CALLERS calls in flight, sent to the leader), due far in the
future so none fires during the run, and end by listing that queue:

- **preload_retained**: every timer whose call was acknowledged is still pending after the final
  phase (read through the linearizable list route, page by page, in key order), and no node's
  pendingTimers count (`/api/v1/usage`, each node after its own read barrier) is below the number
  acknowledged. Nothing ever cancels or fires these timers, so a missing one is a lost write.

Each call and each list page is in the history (f `preload` / `preload-list`), outside the
workloads' keys, so no other checker looks at them.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from jepsen.client import HistoryClient, NodeClient, Outcome
from jepsen.history import INFO, OK

QUEUE = "jpre"
OPS_PER_CALL = 256  # the route's default QUEEN_TIMERS_MAX_OPS_PER_CALL
# Calls in flight: enough to keep the leader's batcher full, few enough not to starve the nodes'
# Raft threads on two cores.
CALLERS = 6
# Due in 30 days: far past any run, inside the default horizon (90 days).
DELAY_MS = 30 * 86_400_000
PAYLOAD = base64.b64encode(b"preload").decode()
# The preload gives up after this long and the run goes on with what was acknowledged (noted).
DEADLINE_S = 600.0
# A refused or unanswered call is sent again (the same keys and txns: a schedule is an upsert by key)
# after this pause, to the leader found anew.
RETRY_PAUSE_S = 0.5
# The list route's largest page (docs/spec.md section 2 clamps limit to 1..1000).
LIST_PAGE = 1000
LIST_ATTEMPTS = 20
LIST_RETRY_S = 0.5
# Reading a million timers back takes about a minute; past this the read stops and only the keys
# read so far are judged.
READ_DEADLINE_S = 300.0
COUNTEREXAMPLES = 20


def key_of(index: int) -> str:
    # Zero-padded, so the list route's key order is index order and a read that stops short has read
    # exactly a prefix of the indexes.
    return f"p{index:07d}"


def index_of(key: str) -> int | None:
    return int(key[1:]) if key.startswith("p") and key[1:].isdigit() else None


def batch_ops(batch: int, count: int) -> list[dict]:
    first = batch * OPS_PER_CALL
    return [{"op": "schedule", "queue": QUEUE, "timerKey": key_of(i), "delayMs": DELAY_MS, "txn": key_of(i),
             "payload": PAYLOAD} for i in range(first, min(count, first + OPS_PER_CALL))]


def batch_count(count: int) -> int:
    return (count + OPS_PER_CALL - 1) // OPS_PER_CALL


@dataclass
class PreloadResult:
    requested: int
    acked_batches: list[int] = field(default_factory=list)  # every op of these calls answered scheduled
    info_batches: list[int] = field(default_factory=list)  # never acknowledged; an attempt may have applied
    calls: int = 0
    seconds: float = 0.0
    complete: bool = False

    @property
    def acknowledged(self) -> int:
        return sum(min(OPS_PER_CALL, self.requested - b * OPS_PER_CALL) for b in self.acked_batches)

    def to_json(self) -> dict:
        data = asdict(self)
        data["acknowledged"] = self.acknowledged
        return data


def _scheduled_all(outcome: Outcome, expected: int) -> bool:
    results = outcome.body.get("results") if isinstance(outcome.body, dict) else None
    return (isinstance(results, list) and len(results) == expected
            and all(isinstance(r, dict) and r.get("status") in ("scheduled", "rescheduled") for r in results))


def _normalize_call(expected: int) -> Callable[[Outcome], tuple[str, dict]]:
    def normalize(outcome: Outcome) -> tuple[str, dict]:
        if outcome.type != OK:
            return outcome.type, {"status": outcome.status, "body": str(outcome.body)[:300]}
        if not _scheduled_all(outcome, expected):
            return INFO, {"status": outcome.status, "body": str(outcome.body)[:300]}
        return OK, {"status": outcome.status, "scheduled": expected}
    return normalize


async def preload(client: HistoryClient, count: int, find_leader: Callable[[], Any],
                  deadline_s: float = DEADLINE_S) -> PreloadResult:
    """Schedules `count` timers in QUEUE; every call in the history. `find_leader` (blocking) names
    the node to send to, or None."""
    result = PreloadResult(count)
    started = time.monotonic()
    pending = list(range(batch_count(count)))
    pending.reverse()  # pop() hands out batch 0 first
    leader: list[str | None] = [await asyncio.to_thread(find_leader)]
    unacked: set[int] = set()

    async def caller(slot: int) -> None:
        generation = 0
        while pending and time.monotonic() - started < deadline_s:
            batch = pending.pop()
            ops = batch_ops(batch, count)
            node = leader[0] or client.node_ids[(slot + generation) % len(client.node_ids)]
            value = {"queue": QUEUE, "first": batch * OPS_PER_CALL, "count": len(ops)}
            type_, _ = await client.call(f"preload-{slot}-{generation}", node, "preload", value, "POST",
                                         "/api/v1/timers", {"operations": ops}, _normalize_call(len(ops)))
            result.calls += 1
            if type_ == OK:
                result.acked_batches.append(batch)
                unacked.discard(batch)
                continue
            unacked.add(batch)
            pending.append(batch)
            if type_ == INFO:
                generation += 1  # Jepsen's rule: the unanswered call may still be in flight
            await asyncio.sleep(RETRY_PAUSE_S)
            leader[0] = await asyncio.to_thread(find_leader)

    await asyncio.gather(*(caller(slot) for slot in range(CALLERS)))
    result.acked_batches.sort()
    result.info_batches = sorted(unacked)
    result.seconds = round(time.monotonic() - started, 3)
    result.complete = len(result.acked_batches) == batch_count(count)
    return result


@dataclass
class PreloadReadBack:
    """What the final read found: runs [start, end) of preload indexes present, and how far it got."""

    present_runs: list[list[int]] = field(default_factory=list)
    read_through: int = -1  # every index <= this was judged (the read is in key order)
    complete: bool = False
    problem: str | None = None
    pending_by_node: dict[str, Any] = field(default_factory=dict)  # usage pendingTimers, or the error
    seconds: float = 0.0
    pages: int = 0

    def add(self, index: int) -> None:
        if self.present_runs and self.present_runs[-1][1] == index:
            self.present_runs[-1][1] = index + 1
        else:
            self.present_runs.append([index, index + 1])


async def _list_page(client: HistoryClient, after: str | None, attempt_nodes: list[str]) -> Outcome | None:
    path = f"/api/v1/timers/{QUEUE}?limit={LIST_PAGE}" + (f"&after={after}" if after else "")
    for attempt in range(LIST_ATTEMPTS):
        node = attempt_nodes[attempt % len(attempt_nodes)]
        invocation = client.history.invoke("preload-read", "preload-list", {"after": after}, node)
        outcome = await client.nodes[node].request("GET", path)
        rows = outcome.body.get("rows") if isinstance(outcome.body, dict) else None
        summary = {"status": outcome.status, "rows": len(rows) if isinstance(rows, list) else None}
        client.history.complete(invocation, outcome.type, summary if outcome.type == OK else outcome.answer)
        if outcome.type == OK and isinstance(rows, list):
            return outcome
        await asyncio.sleep(LIST_RETRY_S)
    return None


async def read_back(client: HistoryClient, admin_nodes: dict[str, NodeClient], first_node: str,
                    deadline_s: float = READ_DEADLINE_S) -> PreloadReadBack:
    """Lists QUEUE whole (from first_node, then the others), then asks each node its pendingTimers."""
    read = PreloadReadBack()
    started = time.monotonic()
    order = [first_node] + [node for node in client.node_ids if node != first_node]
    after: str | None = None
    while True:
        if time.monotonic() - started > deadline_s:
            read.problem = f"stopped after {deadline_s:.0f} s"
            break
        outcome = await _list_page(client, after, order)
        read.pages += 1
        if outcome is None:
            read.problem = f"the list page after {after!r} did not answer in {LIST_ATTEMPTS} attempts"
            break
        body = outcome.body
        for row in body["rows"]:
            index = index_of(str(row.get("timerKey")))
            if index is not None:
                read.add(index)
        if body["rows"]:
            last = index_of(str(body["rows"][-1].get("timerKey")))
            read.read_through = last if last is not None else read.read_through
        if not body.get("truncated") or not body.get("nextAfter"):
            read.complete = True
            break
        after = body["nextAfter"]
    for node, node_client in admin_nodes.items():
        outcome = await node_client.request("GET", "/api/v1/usage")
        ok = outcome.type == OK and isinstance(outcome.body, dict)
        read.pending_by_node[node] = outcome.body.get("pendingTimers") if ok else {"error": outcome.answer}
    read.seconds = round(time.monotonic() - started, 3)
    return read


def _acked_indexes(result: dict) -> list[tuple[int, int]]:
    """[start, end) of every acknowledged call's indexes."""
    requested = result["requested"]
    return [(b * OPS_PER_CALL, min(requested, (b + 1) * OPS_PER_CALL)) for b in result["acked_batches"]]


def check_preload_retained(result: dict, read: dict) -> dict:
    """preload_retained (see the module docstring); `result` and `read` as stored in final.json."""
    acknowledged = result.get("acknowledged", 0)
    through = read["read_through"] if not read["complete"] else result["requested"] - 1
    present = read["present_runs"]
    missing: list[str] = []
    missing_count = 0
    judged = 0
    run_at = 0
    for start, end in _acked_indexes(result):
        for index in range(start, min(end, through + 1)):
            judged += 1
            while run_at < len(present) and present[run_at][1] <= index:
                run_at += 1
            if run_at < len(present) and present[run_at][0] <= index < present[run_at][1]:
                continue
            missing_count += 1
            if len(missing) < COUNTEREXAMPLES:
                missing.append(key_of(index))
    counterexamples: list[dict] = [{"missing": key} for key in missing]
    short_nodes = {node: pending for node, pending in read["pending_by_node"].items()
                   if isinstance(pending, int) and pending < acknowledged}
    counterexamples += [{"node": node, "pendingTimers": pending, "acknowledged": acknowledged}
                        for node, pending in short_nodes.items()]
    violations = missing_count + len(short_nodes)
    valid: bool | None = False if violations else (True if read["complete"] else None)
    return {
        "valid": valid, "violations": violations, "counterexamples": counterexamples,
        "acknowledged": acknowledged, "keys_judged": judged, "missing": missing_count,
        "present": sum(end - start for start, end in present),
        "pending_by_node": {node: p if isinstance(p, int) else "no answer" for node, p in read["pending_by_node"].items()},
    }
