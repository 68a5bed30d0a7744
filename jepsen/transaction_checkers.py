"""Checkers of the txn workload: POST /api/v1/transaction under faults, judged from the read-back.

A transaction T (txn id `x<n>`) does, in one entry:
- pushes `T-a` to partition A and `T-b` to partition B of one queue;
- KV: `check` the version of a shared counter, `put` the counter (value `{"n": version + 1}`) and
  `put` its own key `op-T` = `{"counter", "prev": the version it expected}`;
- one timer op: `fire` (schedules timer T, due in a few seconds: its message `T-t` must be in the
  destination log at the end), `hold` (schedules timer T, due in an hour: it must still be pending
  at the end), or `release` (cancels, with requirePending, the timer of an earlier, acknowledged
  hold: that timer must be gone at the end, and the release is never refused `timer_not_pending`).

Each of those is an *effect* that the final read-back shows or not. Atomicity: a transaction shows
all of its effects or none; an `ok` one all, a `fail` (refused, or rejected before proposing) none,
an `info` one all or none. A transaction retried after `info` is judged over all its attempts (the
retry of an applied attempt is refused as a `duplicate`, which is a definite no for that attempt).

The KV counter proves serializability of the check+put: the `prev` versions of the applied
transactions on one counter (found through their `op-T` keys) must be exactly 0..N-1, each once,
where N is the counter's final version, and its value must say N.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

from jepsen.checkers import _property, check_replicas_agree
from jepsen.history import FAIL, INFO, OK, Operation, client_operations
from jepsen.queue_checkers import check_pushes

TXN_F = "txn"
READ_F = "read"
PARTITION_A = "pa"
PARTITION_B = "pb"
# Names of the logs read back in the final phase (keys of FinalReads.logs).
LOG_A = "jx/pa"
LOG_B = "jx/pb"
LOG_FIRES = "jxt"
FIRE, HOLD, RELEASE = "fire", "hold", "release"


def push_txn(txn: str, partition: str) -> str:
    return f"{txn}-{'a' if partition == PARTITION_A else 'b'}"


def fired_txn(txn: str) -> str:
    return f"{txn}-t"


def op_key(txn: str) -> str:
    return f"op-{txn}"


def transaction_attempts(operations: list[Operation]) -> dict[str, list[Operation]]:
    """txn -> its attempts, in invocation order."""
    attempts: dict[str, list[Operation]] = defaultdict(list)
    for op in client_operations(operations):
        if op.f == TXN_F and isinstance(op.value, dict):
            attempts[op.value["txn"]].append(op)
    return attempts


def _outcome(attempts: list[Operation]) -> str:
    """ok when any attempt was acknowledged, fail when every attempt certainly did nothing, else info."""
    types = {op.type for op in attempts}
    return OK if OK in types else FAIL if types == {FAIL} else INFO


def _possibly_applied_releases(attempts: dict[str, list[Operation]]) -> dict[str, str]:
    """held txn -> the release txn that may have cancelled its timer."""
    releases = {}
    for txn, ops in attempts.items():
        value = ops[0].value
        if value["timer"]["kind"] == RELEASE and _outcome(ops) != FAIL:
            releases[value["timer"]["target"]] = txn
    return releases


def transaction_effects(attempts: dict[str, list[Operation]], logs: dict[str, list[dict]],
                        kv_rows: dict[str, dict], pending_timers: dict[str, dict]) -> dict[str, dict[str, bool | None]]:
    """txn -> {effect: shown in the read-back (True/False), or None when it cannot be told}."""
    in_log = {name: {record.get("txn") for record in records} for name, records in logs.items()}
    releases = _possibly_applied_releases(attempts)
    effects = {}
    for txn, ops in attempts.items():
        timer = ops[0].value["timer"]
        shown: dict[str, bool | None] = {
            "push_a": push_txn(txn, PARTITION_A) in in_log.get(LOG_A, set()),
            "push_b": push_txn(txn, PARTITION_B) in in_log.get(LOG_B, set()),
            "kv_op_key": bool((kv_rows.get(op_key(txn)) or {}).get("found")),
        }
        if timer["kind"] == FIRE:
            shown["timer_fired"] = fired_txn(txn) in in_log.get(LOG_FIRES, set())
        elif timer["kind"] == HOLD:
            # A hold that a release may have cancelled shows nothing by itself: the release's
            # own atomicity judges that cancel.
            row = pending_timers.get(txn)
            shown["timer_pending"] = None if txn in releases else (row is not None and row.get("txn") == fired_txn(txn))
        else:
            shown["target_cancelled"] = timer["target"] not in pending_timers
        effects[txn] = shown
    return effects


def check_atomicity(attempts: dict[str, list[Operation]], effects: dict[str, dict[str, bool | None]]) -> dict:
    problems = []
    counts: Counter = Counter()
    for txn, ops in attempts.items():
        outcome = _outcome(ops)
        shown = {name: value for name, value in effects[txn].items() if value is not None}
        visible = {name for name, value in shown.items() if value}
        counts[(outcome, "all" if len(visible) == len(shown) else "none" if not visible else "part")] += 1
        if outcome == OK:
            wrong = len(visible) < len(shown)
        elif outcome == FAIL:
            wrong = bool(visible)
        else:
            wrong = 0 < len(visible) < len(shown)
        if wrong:
            problems.append({"txn": txn, "outcome": outcome, "effects": effects[txn],
                             "attempts": [op.summary() for op in ops]})
    return _property(not problems, problems,
                     transactions={f"{o}/{v}": n for (o, v), n in sorted(counts.items())})


def _counter_version(op: Operation) -> int | None:
    """The counter's version after an ok attempt: its answer's last KV row for the counter (the
    put's; the check's row, before it, holds the version the check saw)."""
    rows = (op.answer or {}).get("kv") if isinstance(op.answer, dict) else None
    if not isinstance(rows, list):
        return None
    for row in reversed(rows):
        if isinstance(row, dict) and row.get("key") == op.value["counter"]:
            return row.get("version")
    return None


def _refusal_reason(op: Operation) -> str:
    """Why an attempt certainly did nothing: the transaction's reason, a 503's reason (refused before
    proposing), or the client's error (a refused connect)."""
    answer = op.answer if isinstance(op.answer, dict) else {}
    body = answer.get("body") if isinstance(answer.get("body"), dict) else {}
    return str(answer.get("reason") or body.get("reason") or body.get("error") or "unknown")


def check_releases_found_their_hold(attempts: dict[str, list[Operation]]) -> dict:
    """A release cancels an acknowledged hold that no other release took and that is due long after
    the run, with requirePending: a `timer_not_pending` refusal means the hold was lost or fired.
    (A retry of an applied release is refused `duplicate` first: pushes are checked before timers.)"""
    problems = []
    releases = 0
    for txn, ops in attempts.items():
        timer = ops[0].value["timer"]
        if timer["kind"] != RELEASE:
            continue
        releases += 1
        if any(op.type == FAIL and _refusal_reason(op) == "timer_not_pending" for op in ops):
            problems.append({"txn": txn, "target": timer["target"], "attempts": [op.summary() for op in ops]})
    return _property(not problems, problems, releases=releases)


def check_kv_counters(attempts: dict[str, list[Operation]], kv_rows: dict[str, dict], counters: list[str]) -> dict:
    """No lost update on any counter, versions strictly increasing in real time, stale checks refused."""
    problems = []
    applied_by_counter: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for key, row in kv_rows.items():
        value = row.get("value") if row.get("found") else None
        if key.startswith("op-") and isinstance(value, dict):
            applied_by_counter[value.get("counter")].append((value.get("prev"), key[len("op-"):]))
    for counter in counters:
        row = kv_rows.get(counter) or {}
        version = row.get("version") if row.get("found") else 0
        value = (row.get("value") or {}).get("n", 0) if row.get("found") else 0
        prevs = Counter(prev for prev, _ in applied_by_counter.get(counter, []))
        doubled = sorted(prev for prev, n in prevs.items() if n > 1)
        missing = [v for v in range(version or 0) if v not in prevs]
        beyond = sorted(prev for prev in prevs if not isinstance(prev, int) or prev >= (version or 0))
        if doubled:
            problems.append({"kind": "two_applied_transactions_expected_one_version", "counter": counter,
                             "versions": doubled[:10],
                             "txns": [t for p, t in applied_by_counter[counter] if p in doubled][:10]})
        if missing or beyond or sum(prevs.values()) != (version or 0):
            problems.append({"kind": "applied_transactions_do_not_account_for_the_counter", "counter": counter,
                             "final_version": version, "applied_transactions": sum(prevs.values()),
                             "missing_prev_versions": missing[:10],
                             "prev_versions_past_final": beyond[:10]})
        if value != version:
            problems.append({"kind": "counter_value_differs_from_its_version", "counter": counter,
                             "final_version": version, "final_value": value,
                             "applied_transactions": sum(prevs.values())})
    ok_writes = []
    for txn, ops in attempts.items():
        value = ops[0].value
        if value.get("stale") and _outcome(ops) == OK:
            problems.append({"kind": "stale_precondition_accepted", "txn": txn,
                             "attempts": [op.summary() for op in ops]})
        for op in ops:
            if op.type != OK:
                continue
            got = _counter_version(op)
            expected = (value.get("expectedVersion") or 0) + 1
            if got != expected:
                problems.append({"kind": "answered_version_is_not_expected_plus_one", "txn": txn,
                                 "expected": expected, "answered": got, "attempt": op.summary()})
            ok_writes.append((op, got))
    for later, later_version in ok_writes:
        for earlier, earlier_version in ok_writes:
            if (earlier.value["counter"] == later.value["counter"] and earlier.complete_time < later.invoke_time
                    and not (earlier_version or 0) < (later_version or 0)):
                problems.append({"kind": "version_not_increasing_in_real_time", "earlier": earlier.summary(),
                                 "later": later.summary()})
    refusals = Counter(_refusal_reason(op) for ops in attempts.values() for op in ops if op.type == FAIL)
    return _property(not problems, problems, acknowledged_writes=len(ok_writes),
                     refusal_reasons={str(k): v for k, v in sorted(refusals.items(), key=str)})


def _as_pushes(attempts: dict[str, list[Operation]], log_name: str) -> list[Operation]:
    """Each attempt's push to `log_name` (or its fire, for the destination log) as a push operation,
    so the queue workload's checks judge the partition."""
    pushes = []
    for txn, ops in attempts.items():
        for op in ops:
            verdict: dict[str, Any] = {}
            results = (op.answer or {}).get("pushes") if isinstance(op.answer, dict) else None
            if log_name == LOG_FIRES:
                if op.value["timer"]["kind"] != FIRE:
                    continue
                item = fired_txn(txn)
            else:
                partition = PARTITION_A if log_name == LOG_A else PARTITION_B
                item = push_txn(txn, partition)
                if op.type == OK and isinstance(results, list):
                    verdict = next((r for r in results if isinstance(r, dict) and r.get("partition") == partition), {})
            pushes.append(dataclasses.replace(op, f="push", value={"queue": log_name, "txn": item},
                                              answer={"result": verdict}))
    return pushes


def merge_properties(per_log: dict[str, dict]) -> dict:
    """One verdict per property over several logs: false if any is, unknown if any is, else true."""
    merged: dict[str, dict] = {}
    for log_name, results in per_log.items():
        for name, prop in results.items():
            into = merged.setdefault(name, {"valid": True, "violations": 0, "counterexamples": [], "per_log": {}})
            if prop.get("valid") is False or into["valid"] is False:
                into["valid"] = False
            elif prop.get("valid") is None:
                into["valid"] = None
            into["violations"] += prop.get("violations", 0)
            into["counterexamples"] += [dict(c, log=log_name) for c in prop.get("counterexamples", [])]
            into["per_log"][log_name] = {k: v for k, v in prop.items() if k != "counterexamples"}
    return merged


def check_transactions(operations: list[Operation], logs: dict[str, list[dict]], replica_logs: dict[str, dict],
                       kv_rows: dict[str, dict], pending_timers: dict[str, dict], counters: list[str],
                       log_complete: dict[str, bool]) -> dict:
    attempts = transaction_attempts(operations)
    effects = transaction_effects(attempts, logs, kv_rows, pending_timers)
    results = {"transaction_atomicity": check_atomicity(attempts, effects),
               "kv_counter_serializable": check_kv_counters(attempts, kv_rows, counters),
               "release_found_hold_pending": check_releases_found_their_hold(attempts)}
    per_log = {name: check_pushes(_as_pushes(attempts, name), logs.get(name, []), name,
                                  exactly_once_when_acked=True, log_complete=log_complete.get(name, False))
               for name in (LOG_A, LOG_B, LOG_FIRES)}
    results.update(merge_properties(per_log))
    results["replicas_agree"] = merge_properties(
        {name: {"replicas_agree": check_replicas_agree(replica_logs.get(name, {}), name)}
         for name in (LOG_A, LOG_B, LOG_FIRES)})["replicas_agree"]
    return results
