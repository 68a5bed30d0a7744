"""Checkers of the queue and dedup workloads: pushes against the log, and consumers' pops and acks
(any workload whose consumers pop and ack)."""

from __future__ import annotations

from collections import defaultdict

from jepsen.checkers import _property, _result, check_log_offsets
from jepsen.history import FAIL, INFO, OK, Operation, client_operations


def check_pushes(operations: list[Operation], log: list[dict], queue: str, exactly_once_when_acked: bool = False,
                 log_complete: bool = True) -> dict:
    pushes = [op for op in client_operations(operations)
              if op.f == "push" and isinstance(op.value, dict) and op.value.get("queue") == queue]
    by_txn: dict[str, list[Operation]] = defaultdict(list)
    for op in pushes:
        by_txn[op.value["txn"]].append(op)
    log_by_txn: dict[str, list[dict]] = defaultdict(list)
    for record in log:
        log_by_txn[record.get("txn")].append(record)
    by_offset = {record.get("offset"): record for record in log}

    duplicates = [{"txn": txn, "offsets": [r.get("offset") for r in records]}
                  for txn, records in log_by_txn.items() if len(records) > 1]
    lost = [{"txn": txn, "acknowledged_by": [op.summary() for op in ops if op.type == OK][:3]}
            for txn, ops in by_txn.items() if any(op.type == OK for op in ops) and txn not in log_by_txn]
    unexpected = []
    for txn, records in log_by_txn.items():
        attempts = by_txn.get(txn)
        if not attempts:
            unexpected.append({"kind": "never_pushed", "txn": txn, "records": records})
        elif all(op.type == FAIL for op in attempts):
            unexpected.append({"kind": "from_failed_push", "txn": txn, "records": records})
    answers = []
    for txn, ops in by_txn.items():
        offsets = {(_result(op).get("offset")) for op in ops if op.type == OK}
        offsets.discard(None)
        for offset in offsets:
            record = by_offset.get(offset)
            if record is None or record.get("txn") != txn:
                answers.append({"kind": "answered_offset_holds_another_message", "txn": txn, "offset": offset,
                                "record": record})
        if exactly_once_when_acked and len(offsets) > 1:
            answers.append({"kind": "acknowledged_with_different_offsets", "txn": txn, "offsets": sorted(offsets)})
    results = {
        "at_most_once": _property(not duplicates, duplicates, distinct_txns=len(log_by_txn)),
        "no_lost_acknowledged_pushes": _property((not lost) if log_complete else None, lost,
                                                 acknowledged=sum(1 for ops in by_txn.values()
                                                                  if any(op.type == OK for op in ops))),
        "no_unexpected_messages": _property(not unexpected, unexpected),
        "push_answers_match_log": _property(not answers, answers),
    }
    results.update(check_log_offsets(log, queue))
    return results


def check_queue_consumption(operations: list[Operation], log: list[dict], queue: str) -> dict:
    """Pops and acks against the log: what was delivered exists, an acked message is not
    delivered again to its group, and a pop never starts past the group's acked prefix."""
    ops = [op for op in client_operations(operations)
           if (op.f in ("pop", "ack") or _acks_in_transaction(op))
           and isinstance(op.value, dict) and op.value.get("queue") == queue]
    by_offset = {record.get("offset"): record for record in log}
    pops_by_group: dict[str, list[Operation]] = defaultdict(list)
    acks_by_group: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        (pops_by_group if op.f == "pop" else acks_by_group)[op.value["group"]].append(op)

    mismatched = []
    redelivered = []
    skipped = []
    deliveries = 0
    # Acks sent again after an `info`, and those answered success (the first try's verdict).
    retries = [op for group_acks in acks_by_group.values() for op in group_acks if op.value.get("retry")]
    retries_answered = sum(1 for op in retries if op.type == OK and any(v.get("success") for v in _ack_verdicts(op)))
    for group, pops in pops_by_group.items():
        # (completion time, offset) of every item an ack certainly completed.
        completed: list[tuple[int, int]] = []
        # (invocation time, offset) of every item an ack possibly completed.
        possibly: list[tuple[int, int]] = []
        for ack in acks_by_group.get(group, []):
            if not ack.possibly_applied:
                continue
            verdicts = _ack_verdicts(ack)
            for position, item in enumerate(ack.value.get("items") or []):
                offset = item.get("offset")
                if ack.type == OK and position < len(verdicts) and verdicts[position].get("success"):
                    completed.append((ack.complete_time, offset))
                    possibly.append((ack.invoke_time, offset))
                elif ack.type == INFO:
                    possibly.append((ack.invoke_time, offset))
        for pop in pops:
            if pop.type != OK:
                continue
            messages = (pop.answer or {}).get("messages") or []
            deliveries += len(messages)
            for message in messages:
                record = by_offset.get(message.get("offset"))
                if record is None or record.get("txn") != message.get("txn"):
                    mismatched.append({"group": group, "delivered": message, "log_record": record, "pop": pop.summary()})
                for done_at, offset in completed:
                    if offset == message.get("offset") and done_at < pop.invoke_time:
                        redelivered.append({"group": group, "offset": offset, "txn": message.get("txn"),
                                            "pop": pop.summary()})
                        break
            if messages:
                acked_offsets = {offset for began, offset in possibly if began < pop.complete_time}
                next_expected = 0
                while next_expected in acked_offsets:
                    next_expected += 1
                first = min(m.get("offset") for m in messages)
                if first > next_expected:
                    skipped.append({"group": group, "first_offset": first, "acked_prefix_end": next_expected,
                                    "pop": pop.summary()})
    return {
        "deliveries_match_log": _property(not mismatched, mismatched, deliveries=deliveries),
        "no_redelivery_after_completed_ack": _property(not redelivered, redelivered, retried_acks=len(retries),
                                                       retried_acks_answered_success=retries_answered),
        "pop_never_skips_unacked": _property(not skipped, skipped),
    }


def _acks_in_transaction(op: Operation) -> bool:
    """A transaction that acked a popped batch along with its other parts (the timers workload's
    `txn-ack` cancel): its value names the ack's queue, group, lease and items."""
    return op.f != "ack" and isinstance(op.value, dict) and op.value.get("via") == "txn-ack"


def _ack_verdicts(ack: Operation) -> list[dict]:
    if _acks_in_transaction(ack):
        # All or nothing: an ok transaction settled every item (an ack it could not settle
        # refuses the whole entry, which is then a `fail`).
        return [{"success": ack.type == OK} for _ in ack.value.get("items") or []]
    results = (ack.answer or {}).get("results") if isinstance(ack.answer, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
