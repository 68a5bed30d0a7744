"""TenantState against the plain reference model in timer_model.py, step by step.

Hypothesis drives both through random timer batches, ticks with tight fire bounds, pushes with
repeated txns, pops (queue mode and a named group), prefix acks, lease expiries and restarts from
a snapshot, under a wandering proposer clock that also runs backwards (the group clock must not).
Every answer is compared with the model's, and after every step the model's invariants are
checked on what the state shows through its read helpers, and on its insides
(TenantState.check_invariants: its indexes and counters agree).

What it draws is in state_model_draws.py, the invariants in state_model_invariants.py.
"""

import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from hypothesis_depth import PROPERTY_TIMEOUT_S, STATEFUL_SETTINGS
from queen_raft.state import TenantState
from state_model_draws import (
    CLOCK_STEPS,
    CONSUMER_GROUPS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DELAYS,
    DISTINCT_GROUPS,
    FIRE_POLICIES,
    MAX_OPS_PER_BATCH,
    MAX_POP_BATCH,
    MAX_PUSH_ITEMS,
    PARTITIONS,
    PAYLOADS,
    PRODUCER,
    QUEUES,
    SMALL_PAYLOAD_LIMIT,
    START_WALL_MS,
    TICK_POLICIES,
    TIMER_KEYS,
    assert_matches,
    without_lease_ids,
)
from state_model_invariants import ModelInvariants
from timer_model import TimerModel

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)


class StateAgainstModel(ModelInvariants, RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.state = TenantState()
        self.model = TimerModel()
        self.wall = START_WALL_MS
        self.serial = 0
        self.used_txns = []
        # (leaseId, queue, partition, offsets, consumer group) of every lease a pop took
        self.issued_leases = []
        self.lease_times_s = [300]

    # ---------------------------------------------------------------------------- plumbing
    def mint(self, prefix):
        self.serial += 1
        return f"{prefix}-{self.serial:06d}"

    def now(self, step):
        self.wall += step
        return self.wall

    def schedule_op(self, data, queue, key, txn=None):
        txn = txn if txn is not None else self.mint("tx")
        self.used_txns.append(txn)
        return {
            "op": data.draw(st.sampled_from(["schedule", "reschedule"])),
            "queue": queue,
            "timerKey": key,
            "partition": data.draw(st.sampled_from(PARTITIONS)),
            "delayMs": data.draw(DELAYS),
            "txn": txn,
            "messageId": self.mint("m"),
            "payload": data.draw(PAYLOADS),
            "payloadZstd": False,
            "encrypted": False,
        }

    def run_timers(self, step, ops, max_pending=None, policy=None, check_payload_bound=False):
        now = self.now(step)
        command = {"op": "timers", "now": now, "producerSub": PRODUCER, "maxPending": max_pending,
                   "ops": ops}
        if policy is not None:
            command["policy"] = policy
        if check_payload_bound:
            command["checkPayloadBound"] = True
        fired_before = dict(self.model.fired_counts)
        got = self.state.apply(command)
        want = self.model.timers(now, PRODUCER, ops, max_pending, policy, check_payload_bound)
        assert_matches(got, want, "timers")
        # Coverage labels (pytest --hypothesis-show-statistics): which paths a run reached.
        event(f"timers: {want.get('error', 'applied')}")
        for result in want.get("results", []):
            if result.get("status") in ("fired", "dead_lettered"):
                event(f"timers: cancel answered {result['status']}")
        for outcome, count in self.model.fired_counts.items():
            if count > fired_before[outcome]:
                event(f"timers: fired in the scheduling entry ({outcome})")
        return got

    # ------------------------------------------------------------------------------- rules
    @initialize(configure_q0=st.sampled_from([True, True, False]),
                lease_time=st.sampled_from([1, 3, 300]),
                dedup_window=st.sampled_from([1, 4, 3600]),
                max_payload=st.sampled_from([SMALL_PAYLOAD_LIMIT, SMALL_PAYLOAD_LIMIT,
                                             DEFAULT_MAX_PAYLOAD_BYTES]))
    def configure(self, configure_q0, lease_time, dedup_window, max_payload):
        if not configure_q0:
            return
        options = {"leaseTime": lease_time, "dedupWindowSeconds": dedup_window,
                   "maxPayloadBytes": max_payload}
        now = self.now(0)
        got = self.state.apply({"op": "configure", "now": now, "queue": "q0", "options": options,
                                "mode": "merge"})
        want = self.model.configure(now, "q0", options)
        assert got == want, f"configure: {got!r} != {want!r}"
        self.lease_times_s.append(lease_time)

    @rule(data=st.data(), step=CLOCK_STEPS)
    def timers_batch(self, data, step):
        """Schedules, reschedules and cancels on distinct keys, in one entry."""
        pairs = data.draw(st.lists(st.tuples(st.sampled_from(QUEUES), st.sampled_from(TIMER_KEYS)),
                                   min_size=1, max_size=MAX_OPS_PER_BATCH, unique=True))
        ops = []
        for queue, key in pairs:
            if data.draw(st.integers(0, 4)) == 0:
                ops.append({"op": "cancel", "queue": queue, "timerKey": key,
                            "txn": data.draw(st.one_of(st.none(), st.just(self.mint("ctx"))))})
            else:
                ops.append(self.schedule_op(data, queue, key))
        max_pending = data.draw(st.one_of(st.none(), st.none(), st.integers(0, 6)))
        policy = data.draw(st.one_of(st.none(), FIRE_POLICIES))
        # Entries the API writes carry checkPayloadBound; older ones do not, and apply as before.
        self.run_timers(step, ops, max_pending, policy, data.draw(st.booleans()))

    @rule(data=st.data(), step=CLOCK_STEPS, delay=st.sampled_from([1, 1000]),
          policy=FIRE_POLICIES)
    def timers_at_one_instant(self, data, step, delay, policy):
        """Several keys, in both queues, due at the same instant: only (queue, timerKey) orders
        their fires, and a later bounded tick shows which came first."""
        pairs = data.draw(st.lists(st.tuples(st.sampled_from(QUEUES), st.sampled_from(TIMER_KEYS)),
                                   min_size=2, max_size=MAX_OPS_PER_BATCH, unique=True))
        ops = []
        for queue, key in pairs:
            op = self.schedule_op(data, queue, key)
            op["delayMs"] = delay
            ops.append(op)
        self.run_timers(step, ops, None, policy)

    @precondition(lambda self: self.model.pending_timers)
    @rule(data=st.data(), step=CLOCK_STEPS, echo=st.booleans())
    def cancel_pending(self, data, step, echo):
        """A cancel aimed at a timer that is pending (random batches mostly miss)."""
        queue, key = data.draw(st.sampled_from(sorted(self.model.pending_timers)))
        ops = [{"op": "cancel", "queue": queue, "timerKey": key,
                "txn": self.mint("ctx") if echo else None}]
        self.run_timers(step, ops)

    @precondition(lambda self: self.used_txns)
    @rule(data=st.data(), step=CLOCK_STEPS)
    def schedule_reusing_txn(self, data, step):
        """A txn already seen (pushed or scheduled): the fire must dedup while the window holds."""
        txn = data.draw(st.sampled_from(self.used_txns))
        queue = data.draw(st.sampled_from(QUEUES))
        key = data.draw(st.sampled_from(TIMER_KEYS))
        self.run_timers(step, [self.schedule_op(data, queue, key, txn=txn)])

    @rule(data=st.data(), step=CLOCK_STEPS)
    def timers_batch_with_repeated_key(self, data, step):
        queue = data.draw(st.sampled_from(QUEUES))
        key = data.draw(st.sampled_from(TIMER_KEYS))
        ops = [self.schedule_op(data, queue, key),
               {"op": "cancel", "queue": queue, "timerKey": key, "txn": None}]
        got = self.run_timers(step, ops)
        assert got.get("error") == "timers_bad_request", got

    @rule(data=st.data(), step=CLOCK_STEPS, policy=TICK_POLICIES, aim_at_byte_bound=st.booleans())
    def tick(self, data, step, policy, aim_at_byte_bound):
        now = self.now(step)
        group_now = max(self.model.clock, now)
        due_sizes = [len(t["payload"]) for t in sorted(
            (t for t in self.model.pending_timers.values() if t["dueAt"] <= group_now),
            key=lambda t: (t["dueAt"], t["queue"], t["timerKey"]))]
        if policy is not None and aim_at_byte_bound and len(due_sizes) > 1:
            # Boundary values: the byte bound at, just under or just over a prefix of the due
            # payloads, where "at most fireMaxBytes" is decided.
            prefix = data.draw(st.integers(1, len(due_sizes)))
            bound = sum(due_sizes[:prefix]) + data.draw(st.sampled_from([-1, 0, 1]))
            policy = dict(policy, fireBatch=len(due_sizes), fireMaxBytes=max(1, bound))
            event("tick: byte bound aimed at a prefix of the due payloads")
        command = {"op": "tick", "now": now}
        if policy is not None:
            command["policy"] = policy
        got = self.state.apply(command)
        want = self.model.tick(now, policy)
        assert_matches(got, want, "tick")
        for outcome in ("appended", "duplicate", "failed", "dlq"):
            if want[outcome]:
                event(f"tick: {outcome}")
        if want["moreDue"]:
            event("tick: bounded, more due")

    @rule(data=st.data(), step=CLOCK_STEPS)
    def push(self, data, step):
        items = []
        for _ in range(data.draw(st.integers(1, MAX_PUSH_ITEMS))):
            queue = data.draw(st.sampled_from(QUEUES))
            partition = data.draw(st.sampled_from(PARTITIONS))
            reuse = data.draw(st.sampled_from(["fresh", "any", "same place"]))
            if reuse == "any" and self.used_txns:
                txn = data.draw(st.sampled_from(self.used_txns))
            elif reuse == "same place" and self.model.messages(queue, partition):
                # Dedup is per partition: a txn from elsewhere only tests that it is not global.
                txn = data.draw(st.sampled_from(self.model.messages(queue, partition)))["transactionId"]
            else:
                txn = self.mint("ptx")
            self.used_txns.append(txn)
            items.append({
                "queue": queue,
                "partition": partition,
                "payload": data.draw(PAYLOADS),
                "transactionId": txn,
                "messageId": self.mint("m"),
                "traceId": data.draw(st.sampled_from([None, "trace-1"])),
                "encrypted": False,
            })
        now = self.now(step)
        got = self.state.apply({"op": "push", "now": now, "producerSub": PRODUCER, "items": items})
        reappended_before = sum(self.model.reappended_after_expiry.values())
        want = self.model.push(now, PRODUCER, items)
        assert_matches(got, want, "push")
        for result in want["results"]:
            event(f"push: {result['status']}")
        if sum(self.model.reappended_after_expiry.values()) > reappended_before:
            event("push: txn appended again after its window expired")

    @rule(step=CLOCK_STEPS, queue=st.sampled_from(QUEUES),
          partition=st.one_of(st.none(), st.sampled_from(PARTITIONS)),
          batch=st.integers(1, MAX_POP_BATCH), auto_ack=st.sampled_from([False, False, False, True]),
          group=st.sampled_from(CONSUMER_GROUPS))
    def pop(self, step, queue, partition, batch, auto_ack, group):
        now = self.now(step)
        lease_id = self.mint("lease")
        got = self.state.apply({"op": "pop", "now": now, "queue": queue, "partition": partition,
                                "consumerGroup": group, "batch": batch, "leaseId": lease_id,
                                "autoAck": auto_ack})
        want = self.model.pop(now, queue, partition, batch, lease_id, auto_ack, group)
        if auto_ack:
            assert_matches(without_lease_ids(got), without_lease_ids(want), "pop(autoAck)")
        else:
            assert_matches(got, want, "pop")
        if any(m["deliveryAttempt"] > 1 for m in want["messages"]):
            event("pop: redelivery after an expired lease")
        if want["messages"] and not auto_ack:
            self.issued_leases.append((lease_id, queue, want["messages"][0]["partition"],
                                       [m["offset"] for m in want["messages"]], group))

    def queues_with_deliverable(self):
        return sorted({(q, g) for q in QUEUES for p in PARTITIONS for g in DISTINCT_GROUPS
                       if self.model.deliverable(q, p, g)}, key=repr)

    @precondition(lambda self: self.queues_with_deliverable())
    @rule(data=st.data(), pop_step=st.integers(0, 1500), ack_step=st.integers(0, 1500),
          batch=st.integers(1, MAX_POP_BATCH))
    def consume(self, data, pop_step, ack_step, batch):
        """A consumer's loop: pop a queue known to hold something, then complete a prefix of the
        batch in a second entry (which a 1 s lease may already have outlived)."""
        queue, group = data.draw(st.sampled_from(self.queues_with_deliverable()))
        leases_before = len(self.issued_leases)
        self.pop(pop_step, queue, None, batch, False, group)
        # Time only frees leases, so what was deliverable still is: the pop took a lease.
        assert len(self.issued_leases) == leases_before + 1
        lease_id, _queue, partition, offsets, _group = self.issued_leases[-1]
        count = data.draw(st.integers(1, len(offsets)))
        now = self.now(ack_step)
        acknowledgments = [{"queue": queue, "partition": partition, "offset": o,
                            "status": "completed"} for o in offsets[:count]]
        got = self.state.apply({"op": "ack", "now": now, "consumerGroup": group,
                                "leaseId": lease_id, "acknowledgments": acknowledgments})
        want = self.model.ack(now, lease_id, acknowledgments)
        assert_matches(got, want, "ack")
        event(f"consume: ack {'accepted' if want['results'][0]['success'] else 'refused'}")

    @precondition(lambda self: self.issued_leases)
    @rule(data=st.data(), step=CLOCK_STEPS)
    def ack(self, data, step):
        """Completed acks of a prefix of what a live lease still holds (after, at times, a retry of
        an ack it already settled), or of an expired, settled or superseded lease (refused per
        item, or answered as the first ack when it repeats one)."""
        now = self.now(step)
        self.model.advance(now)  # liveness is judged at this entry's group now
        live = [lease for lease in self.issued_leases if self.model.find_live_lease(lease[0])]
        # Most issued leases are dead by now; aim at a live one three times in four when any is.
        candidates = live if live and data.draw(st.integers(0, 3)) else self.issued_leases
        lease_id, queue, partition, offsets, group = data.draw(st.sampled_from(candidates))
        holder = self.model.find_live_lease(lease_id)
        if holder is not None:
            lease = holder[2]["lease"]
            unsettled = [o for o in lease["offsets"] if o not in lease["settled"]]
            count = data.draw(st.integers(1, len(unsettled)))
            chosen = unsettled[:count]
            status = "completed"
            if lease["settled"] and data.draw(st.booleans()):
                # The answer of an earlier ack of this lease was lost: the client sends it again.
                retry = {"queue": queue, "partition": partition, "offset": lease["settled"][0],
                         "status": data.draw(st.sampled_from(["completed", "completed", "retry"]))}
                acknowledgments = [retry, *({"queue": queue, "partition": partition, "offset": o,
                                             "status": status} for o in chosen)]
                self.check_ack(now, lease_id, group, acknowledgments, "retry on a live lease")
                return
        else:
            # A dead lease: expired (refused), or released by its acks (a retried ack answers as
            # the first did, or is refused when it names another status).
            chosen = offsets[:1]
            status = data.draw(st.sampled_from(["completed", "completed", "retry"]))
        acknowledgments = [{"queue": queue, "partition": partition, "offset": o,
                            "status": status} for o in chosen]
        released = None if holder is not None else self.model.released_leases.get(lease_id)
        label = None if released is None else (
            "retry of a released lease" if released[3] > self.model.clock
            else "retry past the memory of released leases")
        self.check_ack(now, lease_id, group, acknowledgments, label)

    def check_ack(self, now, lease_id, group, acknowledgments, label):
        got = self.state.apply({"op": "ack", "now": now, "consumerGroup": group,
                                "leaseId": lease_id, "acknowledgments": acknowledgments})
        want = self.model.ack(now, lease_id, acknowledgments)
        assert_matches(got, want, "ack")
        event(f"ack{f' ({label})' if label else ''}: "
              f"{'accepted' if want['results'][0]['success'] else 'refused'}")

    @precondition(lambda self: self.model.queues.get("q0", {}).get("options", {}).get(
        "maxPayloadBytes") == SMALL_PAYLOAD_LIMIT)
    @rule(step=CLOCK_STEPS)
    def operator_lifts_the_payload_limit(self, step):
        """Timers of q0 in backoff for an oversized payload fire on their next try: their lag is
        measured from deliverAt, not from the backed-off dueAt."""
        now = self.now(step)
        options = {"maxPayloadBytes": DEFAULT_MAX_PAYLOAD_BYTES}
        got = self.state.apply({"op": "configure", "now": now, "queue": "q0", "options": options,
                                "mode": "merge"})
        assert got == self.model.configure(now, "q0", options)

    @rule(extra=st.integers(0, 2))
    def expire_every_lease(self, extra):
        """Jump the clock just past the longest lease, and let a barrier carry it into the group."""
        target = max(self.model.clock, self.wall) + max(self.lease_times_s) * 1000 + extra
        now = self.now(target - self.wall)
        got = self.state.apply({"op": "barrier", "now": now})
        want = self.model.barrier(now)
        assert got == want

    @rule()
    def restart_from_snapshot(self):
        """A replica restarted from its last snapshot carries on as if nothing happened: leases,
        dedup windows, backoffs, cursors and the clock all live in the image."""
        image = self.state.snapshot()
        self.state = TenantState.restore(image)
        assert self.state.snapshot() == image

    @rule(step=CLOCK_STEPS)
    def barrier(self, step):
        now = self.now(step)
        assert self.state.apply({"op": "barrier", "now": now}) == self.model.barrier(now)


StateAgainstModel.TestCase.settings = STATEFUL_SETTINGS
TestStateAgainstModel = StateAgainstModel.TestCase
