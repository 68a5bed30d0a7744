"""Checkers of the timers workload: schedules, cancels and peeks against the fires found in the log."""

from __future__ import annotations

from collections import defaultdict

from jepsen.checkers import _entirely_before, _property, _result, check_log_offsets, percentiles
from jepsen.history import FAIL, INFO, OK, FaultWindow, Operation, client_operations
from jepsen.linearizability import INVALID, KeyOperation, check_key

# A fire counts as "during a fault" when its lag interval overlaps a fault window or ends within
# this long after one: an election (0.2-0.6 s), a redial (0.5 s) and a catch-up.
FAULT_RECOVERY_GRACE_MS = 2000
# Faults that move node clocks: a restart with an offset, and a runtime jump through the test route.
CLOCK_SKEW_FAULT = "clock-skew"
CLOCK_JUMP_FAULT = "clock-jump"
CLOCK_FAULTS = (CLOCK_SKEW_FAULT, CLOCK_JUMP_FAULT)
# A cancel's answers that say the key had no pending timer.
NOT_PENDING_CANCEL_STATUSES = ("absent", "fired", "dead_lettered")
# The state of one key in the per-key model after a fire of txn T: not pending, its fire remembered.
FIRED = "fired"


class _TimerFacts:
    """What the history says about each timer key and txn."""

    def __init__(self, operations: list[Operation], log: list[dict], queue: str) -> None:
        self.operations = [op for op in client_operations(operations)]
        self.schedules: dict[str, Operation] = {}
        self.by_key: dict[str, list[Operation]] = defaultdict(list)
        for op in self.operations:
            if op.f not in ("schedule", "cancel", "peek") or not isinstance(op.value, dict):
                continue
            self.by_key[op.value["key"]].append(op)
            if op.f == "schedule":
                self.schedules[op.value["txn"]] = op
        self.log = log
        self.log_by_txn: dict[str, list[dict]] = defaultdict(list)
        for record in log:
            self.log_by_txn[record.get("txn")].append(record)
        # The first time a consumer was seen holding each txn: (monotonic ns, wall ms) at completion.
        self.first_seen: dict[str, tuple[int, int]] = {}
        for op in self.operations:
            if op.f != "pop" or op.type != OK or (op.value or {}).get("queue") != queue:
                continue
            for message in (op.answer or {}).get("messages") or []:
                seen = (op.complete_time, op.complete_wall_ms)
                txn = message.get("txn")
                if txn not in self.first_seen or seen[0] < self.first_seen[txn][0]:
                    self.first_seen[txn] = seen
        # deliverAt of each txn, from its ok schedule or from a peek that saw it pending.
        self.deliver_at: dict[str, int] = {}
        for op in self.operations:
            result = _result(op)
            if op.type != OK or not isinstance(result.get("deliverAt"), int):
                continue
            if op.f == "schedule":
                self.deliver_at[op.value["txn"]] = result["deliverAt"]
            elif op.f == "peek" and result.get("found") and result.get("txn"):
                self.deliver_at.setdefault(result["txn"], result["deliverAt"])
        self.end_time = max((op.complete_time or op.invoke_time for op in self.operations), default=0) + 1

    def replaced_txn(self, remover: Operation) -> str | None:
        """The txn `remover` (an ok cancel/reschedule that found a pending timer) must have removed.

        The pending timer at the remover was put there by the last schedule before it. That is
        schedule Y when Y completed before the remover began and every other possibly-applied
        schedule of the key completed before Y began: then nothing could have been scheduled
        between Y and the remover, and Y's timer cannot have fired in between (the remover found
        one pending, and only Y's could be).
        """
        key = remover.value["key"]
        candidates = [op for op in self.by_key[key] if op.f == "schedule" and op is not remover
                      and op.possibly_applied and not _entirely_before(remover, op)]
        latest = [op for op in candidates if _entirely_before(op, remover) and op.type == OK]
        for y in latest:
            if all(other is y or _entirely_before(other, y) for other in candidates):
                return y.value["txn"]
        return None


def _check_at_most_once(facts: _TimerFacts) -> dict:
    problems = [{"txn": txn, "offsets": [r.get("offset") for r in records]}
                for txn, records in facts.log_by_txn.items() if len(records) > 1]
    return _property(not problems, problems, distinct_txns=len(facts.log_by_txn))


def _check_cancel(facts: _TimerFacts) -> dict:
    removed: dict[str, Operation] = {}
    for op in facts.operations:
        if op.type != OK:
            continue
        result = _result(op)
        if op.f == "cancel" and result.get("status") == "cancelled":
            txn = result.get("txn") or facts.replaced_txn(op)
        elif op.f == "schedule" and result.get("status") == "rescheduled":
            txn = facts.replaced_txn(op)
        else:
            continue
        if txn is not None:
            removed.setdefault(txn, op)
    problems = [{"txn": txn, "removed_by": op.summary(), "log": facts.log_by_txn[txn]}
                for txn, op in removed.items() if facts.log_by_txn.get(txn)]
    return _property(not problems, problems, acknowledged_removals=len(removed))


def _check_fired_answers(facts: _TimerFacts, log_complete: bool) -> dict:
    """Every `fired` answer (a cancel's or a peek's) is true: the log holds that txn at that offset
    with that messageId, and the txn was scheduled on that key before the answer came back. That the
    fire came before the cancel in the key's order is the per-key linearizability's part (a `fired`
    answer linearizes only after the fire of that txn)."""
    problems = []
    answers = 0
    for op in facts.operations:
        result = _result(op)
        if op.type != OK or op.f not in ("cancel", "peek") or result.get("status") != "fired":
            continue
        answers += 1
        txn, where = result.get("txn"), (result.get("offset"), result.get("messageId"))
        held = [(r.get("offset"), r.get("messageId")) for r in facts.log_by_txn.get(txn, [])]
        schedule = facts.schedules.get(txn)
        if schedule is None or schedule.value["key"] != op.value["key"] or _entirely_before(op, schedule):
            problems.append({"answer": op.summary(), "problem": "no schedule of that txn on that key before it"})
        elif where not in held and (log_complete or held):
            problems.append({"answer": op.summary(), "problem": "the log does not hold that txn there",
                             "log": facts.log_by_txn.get(txn, [])})
    return _property(not problems, problems, fired_answers=answers)


def _possibly_removes(other: Operation, target_txn: str) -> bool:
    if not other.possibly_applied:
        return False
    result = _result(other)
    if other.f == "cancel":
        return other.type == INFO or (result.get("status") == "cancelled" and result.get("txn") in (None, target_txn))
    if other.f == "schedule":
        return other.type == INFO or result.get("status") == "rescheduled"
    return False


def _shows_not_pending(facts: _TimerFacts, witness: Operation, txn: str) -> bool:
    """An ok answer proving `txn` was not pending at the witness's linearization point (a key holds
    one pending timer, and a txn that left never comes back)."""
    if witness.type != OK:
        return False
    result = _result(witness)
    status = result.get("status")
    if witness.f == "schedule":
        if status == "scheduled":
            return True
        replaced = facts.replaced_txn(witness) if status == "rescheduled" else None
        return replaced is not None and replaced != txn
    if witness.f == "cancel":
        return status in NOT_PENDING_CANCEL_STATUSES or (status == "cancelled" and result.get("txn") not in (None, txn))
    if witness.f == "peek":
        return not result.get("found") or result.get("txn") != txn
    return False


def _check_loss(facts: _TimerFacts, log_complete: bool) -> dict:
    """Every ok schedule is in the log unless an operation may have removed it while pending.

    An operation X may have removed schedule S's timer when X is possibly applied, is a cancel or a
    replacing schedule, is not entirely before S, and began before any ok answer entirely after S
    proved S's timer no longer pending (then X came too late to remove it).
    """
    problems = []
    judged = 0
    for txn, schedule in facts.schedules.items():
        if schedule.type != OK:
            continue
        key = schedule.value["key"]
        proof_times = [w.complete_time for w in facts.by_key[key]
                       if w is not schedule and _entirely_before(schedule, w) and _shows_not_pending(facts, w, txn)]
        gone_by = min(proof_times, default=None)
        superseded = any(
            other is not schedule and not _entirely_before(other, schedule) and _possibly_removes(other, txn)
            and (gone_by is None or other.invoke_time < gone_by)
            and not (other.f == "schedule" and other.type == OK
                     and facts.replaced_txn(other) not in (None, txn))
            for other in facts.by_key[key]
        )
        if superseded:
            continue
        judged += 1
        if txn not in facts.log_by_txn:
            problems.append({"txn": txn, "schedule": schedule.summary(), "kind": "lost"})
    for op in facts.operations:
        if op.f == "peek" and op.type == OK and (op.value or {}).get("final") and _result(op).get("found"):
            problems.append({"kind": "still_pending_after_final_phase", "peek": op.summary()})
    valid = (not problems) if log_complete else None  # an absence in a partial read proves nothing
    return _property(valid, problems, judged_schedules=judged, log_complete=log_complete)


def _check_unexpected(facts: _TimerFacts) -> dict:
    problems = []
    for txn, records in facts.log_by_txn.items():
        schedule = facts.schedules.get(txn)
        if schedule is None:
            problems.append({"kind": "never_scheduled", "txn": txn, "records": records})
        elif schedule.type == FAIL:
            problems.append({"kind": "from_failed_schedule", "txn": txn, "schedule": schedule.summary(),
                             "records": records})
        elif schedule.type == OK:
            minted = _result(schedule).get("messageId")
            for record in records:
                if minted and record.get("messageId") and record["messageId"] != minted:
                    problems.append({"kind": "message_id_differs_from_schedule", "txn": txn,
                                     "scheduled_message_id": minted, "record": record})
    return _property(not problems, problems)


def skew_influence(windows: list[FaultWindow]) -> list[tuple[int, int, int, int]]:
    """(from wall ms, to wall ms, largest forward offset, largest |offset|) per clock fault window.

    A node ahead by s ms stamps entries s ms ahead, and the group clock keeps the maximum stamp, so
    the group runs ahead until the real clock catches up: up to s ms past the window's end.
    """
    spans = []
    for window in windows:
        if window.fault not in CLOCK_FAULTS:
            continue
        offsets = [int(v) for v in (window.detail.get("offsets") or {}).values()]
        forward = max([0] + offsets)
        end = window.end_wall_ms if window.end_wall_ms is not None else 2**62
        spans.append((window.start_wall_ms, end + forward, forward, max([0] + [abs(o) for o in offsets])))
    return spans


def _check_floor(facts: _TimerFacts, windows: list[FaultWindow]) -> dict:
    """Nothing is appended before its deliverAt.

    Judged on the group clock always (the record's createdAt is the fire entry's now). Judged in
    real time (a consumer held the message before deliverAt by the shared host clock) only for fires
    no clock skew could reach; under skew the early fires are reported against the injected skew.
    """
    spans = skew_influence(windows)
    problems = []
    early_under_skew = []
    for txn, records in facts.log_by_txn.items():
        deliver_at = facts.deliver_at.get(txn)
        if deliver_at is None:
            continue
        for record in records:
            created = record.get("createdAt")
            if isinstance(created, int) and created < deliver_at:
                problems.append({"kind": "created_before_deliverAt", "txn": txn, "deliverAt": deliver_at,
                                 "createdAt": created, "early_ms": deliver_at - created})
        seen = facts.first_seen.get(txn)
        if seen is None or seen[1] >= deliver_at:
            continue
        schedule = facts.schedules.get(txn)
        low = schedule.invoke_wall_ms if schedule else seen[1]
        skewed = [s for s in spans if low <= s[1] and seen[1] >= s[0]]
        early = {"txn": txn, "deliverAt": deliver_at, "seen_wall_ms": seen[1], "early_ms": deliver_at - seen[1]}
        if skewed:
            early["forward_skew_ms"] = max(s[2] for s in skewed)
            early_under_skew.append(early)
        else:
            problems.append(dict(early, kind="seen_before_deliverAt"))
    largest = max(early_under_skew, key=lambda e: e["early_ms"], default=None)
    return _property(
        not problems, problems,
        early_fires_under_skew=len(early_under_skew),
        largest_early_fire_under_skew=largest,
        # docs/spec.md section 1: a node ahead by s can make timers fire early by at most s.
        early_within_forward_skew=all(e["early_ms"] <= e["forward_skew_ms"] for e in early_under_skew),
        max_forward_skew_ms=max([0] + [s[2] for s in spans]),
        max_injected_skew_ms=max([0] + [s[3] for s in spans]),
    )


def _in_fault(low_ms: int, high_ms: int, windows: list[FaultWindow]) -> bool:
    return any(window.overlaps_wall(low_ms, high_ms, FAULT_RECOVERY_GRACE_MS) for window in windows)


def _lateness(facts: _TimerFacts, windows: list[FaultWindow]) -> dict:
    """Fire lag (createdAt - deliverAt, on the group clock) and visible lag (first consumer sight -
    deliverAt, an upper bound that includes the consumer's poll), split by quiet and fault periods."""
    lag = {"quiet": [], "fault": []}
    visible = {"quiet": [], "fault": []}
    points = []  # (createdAt, lag) for the timeline
    for txn, records in facts.log_by_txn.items():
        deliver_at = facts.deliver_at.get(txn)
        if deliver_at is None or not records:
            continue
        created = records[0].get("createdAt")
        if isinstance(created, int):
            period = "fault" if _in_fault(deliver_at, max(created, deliver_at), windows) else "quiet"
            lag[period].append(created - deliver_at)
            points.append((created, created - deliver_at))
        seen = facts.first_seen.get(txn)
        if seen is not None:
            period = "fault" if _in_fault(deliver_at, max(seen[1], deliver_at), windows) else "quiet"
            visible[period].append(seen[1] - deliver_at)
    return {
        "valid": True,
        "judged": False,
        "note": "reported, not judged",
        "fire_lag_ms": {period: percentiles(values) for period, values in lag.items()},
        "visible_lag_ms": {period: percentiles(values) for period, values in visible.items()},
        "points": sorted(points),
    }


def timer_step(state, op: KeyOperation):
    """The model of one timer key: the txn pending on it, or (FIRED, txn) when none is pending and
    the state remembers txn's fire, or None (nothing pending, no fire remembered)."""
    kind, outcome, txn = op.kind, op.args.get("outcome"), op.args.get("txn")
    pending = state is not None and not isinstance(state, tuple)
    if kind == "schedule":
        if outcome == "scheduled" and pending:
            return INVALID
        if outcome == "rescheduled" and not pending:
            return INVALID
        return txn
    if kind == "cancel":
        if outcome == "cancelled":
            if not pending or (txn is not None and state != txn):
                return INVALID
            return None  # a cancel that removes a timer forgets the key's earlier fire
        if outcome == "fired":  # the fire of txn came first, and nothing pending since
            return state if state == (FIRED, txn) else INVALID
        if outcome == "absent":  # nothing pending; any remembered fire is forgotten for good
            return INVALID if pending else None
        if outcome == "dead_lettered":  # no fire in the log to order it by: only not pending
            return INVALID if pending else None
        return None  # info: removed whatever was there, if it happened at all
    if kind == "peek":
        status = op.args.get("status")
        if status == "fired":
            return state if state == (FIRED, txn) else INVALID
        if txn is not None:  # found pending
            return state if state == txn else INVALID
        if pending:
            return INVALID
        return None if status == "absent" else state
    if kind == "fire":
        return (FIRED, txn) if state == txn else INVALID
    raise ValueError(f"unknown timer operation {kind!r}")


def timer_key_operations(facts: _TimerFacts, key: str) -> list[KeyOperation]:
    ops: list[KeyOperation] = []
    for op in facts.by_key[key]:
        if op.type == FAIL or (op.f == "peek" and op.type != OK):
            continue  # certainly not applied / a read with no answer constrains nothing
        result = _result(op)
        ret = op.complete_time if op.type == OK else None
        if op.f == "schedule":
            args = {"txn": op.value["txn"], "outcome": result.get("status") if op.type == OK else None}
        elif op.f == "cancel":
            args = {"txn": result.get("txn") if op.type == OK else None,
                    "outcome": result.get("status") if op.type == OK else None}
        else:
            named = result.get("found") or result.get("status") == "fired"
            args = {"txn": result.get("txn") if named else None, "status": result.get("status")}
        ops.append(KeyOperation(len(ops), op.invoke_time, ret, op.f, args, op.summary()))
    # Each txn of this key that is in the log fired once, between its schedule's call and the
    # first time a consumer held it (or the end of the history).
    for txn, schedule in facts.schedules.items():
        if schedule.value["key"] != key or schedule.type == FAIL or txn not in facts.log_by_txn:
            continue
        seen = facts.first_seen.get(txn)
        ret = seen[0] if seen is not None else facts.end_time
        ops.append(KeyOperation(len(ops), schedule.invoke_time, max(ret, schedule.invoke_time), "fire",
                                {"txn": txn}, {"f": "fire", "txn": txn, "seen_wall_ms": seen[1] if seen else None}))
    return ops


def _check_linearizable(facts: _TimerFacts) -> dict:
    problems = []
    unknown = []
    explored = 0
    for key in sorted(facts.by_key):
        ops = timer_key_operations(facts, key)
        result = check_key(ops, None, timer_step)
        explored += result.explored
        if result.linearizable is None:
            unknown.append({"key": key, "operations": len(ops), "explored": result.explored})
        elif not result.linearizable:
            by_id = {op.id: op for op in ops}
            problems.append({
                "key": key,
                "linearized_prefix": [by_id[i].ref for i in result.longest_prefix],
                "could_not_place": by_id[result.stuck_on].ref if result.stuck_on is not None else None,
                "state_then": result.state_at_stuck,
                "operations": [op.ref for op in ops],
            })
    valid = False if problems else (None if unknown else True)
    return _property(valid, problems, keys=len(facts.by_key), unknown_keys=unknown, explored=explored)


def check_timers(operations: list[Operation], log: list[dict], windows: list[FaultWindow], queue: str,
                 log_complete: bool = True) -> dict:
    facts = _TimerFacts(operations, log, queue)
    results = {
        "at_most_once": _check_at_most_once(facts),
        "no_fire_after_acknowledged_cancel": _check_cancel(facts),
        "no_lost_timers": _check_loss(facts, log_complete),
        "no_unexpected_messages": _check_unexpected(facts),
        "floor_not_before_deliverAt": _check_floor(facts, windows),
        "lateness": _lateness(facts, windows),
        "linearizable_per_key": _check_linearizable(facts),
        "fired_answers_name_the_log": _check_fired_answers(facts, log_complete),
    }
    results.update(check_log_offsets(log, queue))
    return results
