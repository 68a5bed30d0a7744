"""TenantState against the plain reference model in timer_model.py, step by step.

Hypothesis drives both through random timer batches, ticks with tight fire bounds, pushes with
repeated txns, pops (queue mode and a named group), prefix acks, lease expiries and restarts from
a snapshot, under a wandering proposer clock that also runs backwards (the group clock must not).
Every answer is compared with the model's, and after every step the model's invariants are
checked on what the state shows through its read helpers, and on its insides
(TenantState.check_invariants: its indexes and counters agree).
"""

import pytest
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hypothesis_depth import PROPERTY_TIMEOUT_S, STATEFUL_SETTINGS
from queen_raft.state import TenantState
from timer_model import DEFAULT_PARTITION, TimerModel, utf8_order

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1"]  # q0 may be configured at the start; q1 is only ever created implicitly.
PARTITIONS = [DEFAULT_PARTITION, "a", "p1"]  # "Default" sorts first: pop(None) takes it first.
TIMER_KEYS = ["k0", "k1", "k2", "k3", "tenant/42", "Z", "é"]  # "é" sorts last as UTF-8 bytes.
PRODUCER = "producer-1"
# None is the queue-mode group; "g1" a named group reading the same partitions independently.
DISTINCT_GROUPS = [None, "g1"]
CONSUMER_GROUPS = [None, None, "g1"]  # drawn: queue mode twice as often

START_WALL_MS = 1_700_000_000_000
HOUR_MS = 3_600_000

# Enough ops per batch to interleave statuses, few enough that keys collide across batches.
MAX_OPS_PER_BATCH = 4
MAX_PUSH_ITEMS = 4
MAX_POP_BATCH = 4
# Payloads around the 12-byte maxPayloadBytes that q0 may get, and around the small fireMaxBytes.
MAX_PAYLOAD = 20
# Pages small enough that paging itself is exercised.
FETCH_PAGE = 3
LIST_PAGE = 2
# Prefixes of the listing: several keys, one key, a key's own text, none of them.
LIST_PREFIXES = ["k", "tenant/", "Z", "é", "k3", "x"]

# The proposer's clock: stays, creeps, jumps past leases and dedup windows, or runs backwards
# (another node, behind by seconds, proposes).
CLOCK_STEPS = st.one_of(
    st.just(0),
    st.integers(1, 1500),
    st.integers(-5000, -1),
    st.integers(1500, 8000),
    st.sampled_from([HOUR_MS - 1, HOUR_MS, HOUR_MS + 1, 300_000]),
)
DELAYS = st.one_of(
    st.integers(-2000, 0),  # already due: fires in the scheduling entry
    st.integers(1, 3000),
    st.integers(3000, 20_000),
    st.sampled_from([0, 1000, 2000]),  # due-time ties: only (queue, timerKey) orders the fires
)
# q0 may be configured with a 12-byte payload limit, which some payloads exceed and some do not.
SMALL_PAYLOAD_LIMIT = 12
DEFAULT_MAX_PAYLOAD_BYTES = 1048576
SMALL_PAYLOAD_MAX = 8
OVER_SMALL_LIMIT = 13
# Few distinct sizes, so a fire batch's byte total often lands exactly on fireMaxBytes.
PAYLOAD_SIZES = [0, 1, 4, SMALL_PAYLOAD_MAX, OVER_SMALL_LIMIT, MAX_PAYLOAD]
PAYLOADS = st.sampled_from(PAYLOAD_SIZES).flatmap(lambda n: st.binary(min_size=n, max_size=n))
POLICY_DICTS = st.fixed_dictionaries({
    "fireBatch": st.integers(1, 3),
    "fireMaxBytes": st.sampled_from([1, 4, 5, 8, 9, 12, 13, 16, 17, 21, 26, 40]),
    "maxAttempts": st.integers(1, 3),
    "backoffMinMs": st.integers(1, 500),
    "backoffMaxMs": st.integers(500, 2000),
})
FIRE_POLICIES = st.one_of(st.none(), POLICY_DICTS)
# Ticks carry a tight policy two times in three, so fire bounds, backoff and the DLQ are reached.
TICK_POLICIES = st.one_of(st.none(), POLICY_DICTS, POLICY_DICTS)


def assert_matches(got, want, where="answer"):
    """Every key the model answers must be in the state's answer with the same value; the state
    may add keys the contract does not name."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{where}: {got!r} is not a dict, want {want!r}"
        for key, value in want.items():
            assert key in got, f"{where}: missing {key!r} in {got!r}, want {want!r}"
            assert_matches(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list), f"{where}: {got!r} is not a list, want {want!r}"
        assert len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_matches(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def without_lease_ids(pop_answer):
    """autoAck keeps no lease; the contract does not say which leaseId such an answer shows."""
    return {"messages": [{k: v for k, v in m.items() if k != "leaseId"}
                         for m in pop_answer["messages"]]}


class StateAgainstModel(RuleBasedStateMachine):
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

    # -------------------------------------------------------------------------- invariants
    def state_log(self, queue, partition):
        records = []
        while True:
            page = self.state.fetch(queue, partition, len(records), FETCH_PAGE)
            assert len(page) <= FETCH_PAGE, page
            if not page:
                return records
            records.extend(page)

    @invariant()
    def the_states_own_invariants_hold(self):
        # Its indexes agree with its collections and its counters with what they count
        # (queen_raft/state/invariants.py), whatever the answers compared below.
        self.state.check_invariants()

    @invariant()
    def group_clock_is_the_max_of_proposals(self):
        clock = self.state.clock() if callable(self.state.clock) else self.state.clock
        assert clock == self.model.clock

    @invariant()
    def partition_logs_agree_and_hold_the_invariants(self):
        cancelled = set(self.model.cancelled_message_ids)
        for queue in QUEUES:
            for partition in PARTITIONS:
                records = self.state_log(queue, partition)
                # Offsets gapless from 0.
                assert [r["offset"] for r in records] == list(range(len(records))), records
                # A txn at most once per partition, unless the model saw its window expire.
                seen = {}
                for r in records:
                    seen[r["transactionId"]] = seen.get(r["transactionId"], 0) + 1
                for txn, count in seen.items():
                    allowed = 1 + self.model.reappended_after_expiry.get((queue, partition, txn), 0)
                    assert count <= allowed, f"{queue}/{partition}: txn {txn} appended {count} times"
                for r in records:
                    # Nothing appended for a timer after an acknowledged cancel (or replacement).
                    assert r["messageId"] not in cancelled, f"cancelled timer fired: {r!r}"
                    # Nothing fires before its deliverAt.
                    deliver_at = self.model.deliver_at_by_message_id.get(r["messageId"])
                    if deliver_at is not None:
                        assert r["createdAt"] >= deliver_at, f"fired early: {r!r} < {deliver_at}"
                want = [{"offset": m["offset"], "transactionId": m["transactionId"],
                         "messageId": m["messageId"], "payload": m["payload"],
                         "createdAt": m["createdAt"]}
                        for m in self.model.messages(queue, partition)]
                assert_matches(records, want, f"fetch {queue}/{partition}")

    @invariant()
    def timers_agree(self):
        assert self.state.next_due_at() == self.model.next_due_at()
        counters = self.state.counters()
        assert counters["pendingTimers"] == len(self.model.pending_timers)
        assert_matches(counters["fired"], self.model.fired_counts, "counters.fired")
        assert counters["billedMessages"] == self.model.billed
        for queue in QUEUES:
            for key in TIMER_KEYS:
                got = self.state.peek_timer(queue, key)
                timer = self.model.pending_timers.get((queue, key))
                if timer is None:
                    assert got is None, f"peek {queue}/{key}: {got!r}, model has no timer"
                    self.fire_answer_agrees(queue, key)
                    continue
                assert_matches(got, {
                    "queue": queue, "timerKey": key, "partition": timer["partition"],
                    "deliverAt": timer["deliverAt"], "txn": timer["txn"],
                    "messageId": timer["messageId"], "payload": timer["payload"],
                    "attempts": timer["attempts"],
                }, f"peek {queue}/{key}")
                # Its text is the state's own; that there is one (after a failed fire, cleared by
                # a reschedule) is the contract.
                assert (got["lastError"] is None) == (timer["lastError"] is None), got

    def fire_answer_agrees(self, queue, key):
        """A key with no pending timer: where its remembered fire went, as the model says; a
        dead letter's dlqId names the key's row in the DLQ."""
        got = self.state.fired_timer(queue, key)
        want = self.model.remembered_fire(queue, key)
        if want is None:
            assert got is None, f"fired {queue}/{key}: {got!r}, the model remembers no fire"
            return
        assert_matches(got, want, f"fired {queue}/{key}")
        event(f"peek: {want['status']}")
        if want["status"] == "dead_lettered":
            row = next(r for r in self.state.dlq_list(queue, 1000) if r["dlqId"] == got["dlqId"])
            assert (row["timerKey"], row["transactionId"]) == (key, want["txn"]), row

    @invariant()
    def listing_pages_through_the_pending_keys_in_byte_order(self):
        for queue in QUEUES:
            listed = []
            after = None
            while True:
                page = self.state.list_timers(queue, after, LIST_PAGE)
                rows = page["rows"]
                assert len(rows) <= LIST_PAGE
                listed.extend(row["timerKey"] for row in rows)
                if not page["truncated"]:
                    break
                assert rows, "truncated page without rows"
                after = page["nextAfter"]
                assert after == rows[-1]["timerKey"]
            assert listed == self.model.timer_keys(queue)
            assert listed == sorted(listed, key=utf8_order)
            for prefix in LIST_PREFIXES:
                assert self.listed_with_prefix(queue, prefix) == [
                    key for key in self.model.timer_keys(queue) if key.startswith(prefix)], prefix

    def listed_with_prefix(self, queue, prefix):
        listed, after = [], None
        while True:
            page = self.state.list_timers(queue, after, LIST_PAGE, prefix)
            listed.extend(row["timerKey"] for row in page["rows"])
            if not page["truncated"]:
                return listed
            after = page["nextAfter"]

    @invariant()
    def deliverable_agrees_with_pop(self):
        for queue in QUEUES:
            for partition in PARTITIONS:
                for group in DISTINCT_GROUPS:
                    assert (self.state.deliverable(queue, partition, group)
                            == self.model.deliverable(queue, partition, group)), (queue, partition,
                                                                                  group)

    @invariant()
    def timer_dead_letters_agree(self):
        for queue in QUEUES:
            want = self.model.queues.get(queue, {"dlq": []})["dlq"]
            rows = self.state.dlq_list(queue, 1000)
            fields = ("messageId", "transactionId", "partition", "consumerGroup", "offset")
            assert (sorted(tuple(r[f] for f in fields) for r in rows)
                    == sorted(tuple(w[f] for f in fields) for w in want)), rows


StateAgainstModel.TestCase.settings = STATEFUL_SETTINGS
TestStateAgainstModel = StateAgainstModel.TestCase
