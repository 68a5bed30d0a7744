"""Checkers: what every workload's properties share, and the partition log's own properties.

Each workload's properties are judged from the history and the partition log read back, in
timer_checkers.py, queue_checkers.py and transaction_checkers.py.

The rule that keeps them honest: an `info` operation is *possibly applied, at any instant after
its invocation*. So a check that needs "X happened" uses only `ok` operations, and a check that
needs "X did not happen" counts every `ok` and `info` operation as a possibility. A `fail` is a
definite no. Each property answers `valid` True / False (or None when it could not be judged, which
is never a pass), with counterexamples that name the operations involved.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

from jepsen.history import FAIL, INFO, OK, Operation, client_operations

# Counterexamples kept per property: enough to debug, small enough for results.json to stay readable.
MAX_COUNTEREXAMPLES = 20


def _result(op: Operation) -> dict:
    answer = op.answer if isinstance(op.answer, dict) else {}
    result = answer.get("result")
    return result if isinstance(result, dict) else {}


def _property(valid: bool | None, counterexamples: list, **extra: Any) -> dict:
    out = {"valid": valid, "violations": len(counterexamples), "counterexamples": counterexamples[:MAX_COUNTEREXAMPLES]}
    out.update(extra)
    return out


def _entirely_before(first: Operation, second: Operation) -> bool:
    """first completed before second was invoked (so first is linearized before second)."""
    return first.complete_time is not None and first.type != INFO and first.complete_time < second.invoke_time


def percentiles(values: Iterable[float]) -> dict:
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "p50": None, "p99": None, "max": None}

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"count": len(ordered), "p50": rank(0.50), "p99": rank(0.99), "max": ordered[-1]}


# ---------------------------------------------------------------------------------------------
# The partition log itself


def check_log_offsets(log: list[dict], queue: str) -> dict:
    """Offsets are gapless from 0, in order, each once."""
    problems = []
    for position, record in enumerate(log):
        if record.get("offset") != position:
            problems.append({"queue": queue, "position": position, "offset": record.get("offset"),
                             "txn": record.get("txn")})
    return {"gapless_offsets": _property(not problems, problems, records=len(log))}


def check_replicas_agree(replica_logs: dict[str, dict], queue: str) -> dict:
    """Every node, read alone after its own read barrier, holds the same partition log.

    A replica whose state machine diverged (it applied entries its peers never committed, or skipped
    some) shows here even when the leader's log is right. A node that could not be read leaves the
    property unknown.
    """
    readable = {node: read["records"] for node, read in replica_logs.items() if not read.get("problem")}
    unreadable = sorted(node for node, read in replica_logs.items() if read.get("problem"))
    problems = []
    if readable:
        reference_node = sorted(readable)[0]
        reference = [(r.get("offset"), r.get("txn"), r.get("messageId")) for r in readable[reference_node]]
        for node, records in sorted(readable.items()):
            mine = [(r.get("offset"), r.get("txn"), r.get("messageId")) for r in records]
            if mine == reference:
                continue
            first = next((i for i, (a, b) in enumerate(zip(mine, reference)) if a != b), min(len(mine), len(reference)))
            problems.append({"queue": queue, "node": node, "compared_with": reference_node,
                             "records": len(mine), "reference_records": len(reference), "first_difference": first,
                             "node_has": mine[first] if first < len(mine) else None,
                             "reference_has": reference[first] if first < len(reference) else None})
    valid = False if problems else (None if unreadable or not replica_logs else True)
    return _property(valid, problems, nodes_read=sorted(readable), nodes_unreadable=unreadable)



# Properties whose violations are things *found* in the log or the history (a duplicate, a fire
# after a cancel, a stranger): a partial read of the log cannot invent them. Every other property
# reports an *absence* (a record not found), which a partial read can fake.
PRESENCE_PROPERTIES = frozenset({
    "replicas_agree",
    "at_most_once", "no_fire_after_acknowledged_cancel", "no_unexpected_messages",
    "floor_not_before_deliverAt", "lateness", "no_redelivery_after_completed_ack", "pop_never_skips_unacked",
})


def judged_on_partial_log(results: dict) -> dict:
    """When the final read of a log stopped short, an absence proves nothing: those properties
    become unknown (never a pass, never a failure), with the reason attached."""
    for name, prop in results.items():
        if name not in PRESENCE_PROPERTIES and isinstance(prop, dict) and prop.get("valid") is not None:
            prop["valid"] = None
            prop["unjudged_because"] = "the final read of the partition log was incomplete"
    return results


def overall_valid(results: dict) -> bool | None:
    """False if a property failed; else None if one is unknown or none was judged at all (a run whose
    cluster never came up holds no property: nothing judged is not a pass); else True."""
    verdicts = [prop.get("valid") for prop in results.values() if isinstance(prop, dict)]
    if any(v is False for v in verdicts):
        return False
    if not verdicts or any(v is None for v in verdicts):
        return None
    return True


def count_types(operations: list[Operation]) -> dict:
    counts = Counter(op.type for op in client_operations(operations))
    return {t: counts.get(t, 0) for t in (OK, FAIL, INFO)}
