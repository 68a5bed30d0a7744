"""Replicas agree: the same entries give the same answers and the same snapshot bytes, and a
snapshot taken anywhere, restored and continued, is indistinguishable from never snapshotting.

No model here: the sequences use every command of docs/commands.md (KV, transactions, consumer
groups, fire failures, configure, admin...), including ones the state refuses, because a replica
must diverge on none of them. Each replica gets its own msgpack-decoded copy of every entry, as
the Raft layer hands it over, so no replica can share a mutable object with another.
"""

import uuid

import msgpack
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import SEQUENCE_SETTINGS, PROPERTY_TIMEOUT_S
from queen_raft.state import TenantState

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1"]
PARTITIONS = ["Default", "p1"]
TIMER_KEYS = ["k0", "k1", "k2", "tenant/42"]
CONSUMER_GROUPS = [None, None, "g1"]
KV_NAMESPACES = ["ns0", "ns1"]
KV_KEYS = ["a", "b", "c"]
PRODUCER = "producer-1"

START_WALL_MS = 1_700_000_000_000
# Long enough to cross leases, dedup windows, backoffs and KV TTLs a few times; short enough that
# a hundred sequences stay a few seconds.
MAX_COMMANDS = 30
MAX_OPS = 3
# An ack of the last pop names offsets 0..ACKED_OFFSETS-1: a short history's pops deliver from there.
ACKED_OFFSETS = 8

CLOCK_STEPS = st.one_of(st.just(0), st.integers(1, 3000), st.integers(-3000, -1),
                        st.sampled_from([60_000, 3_600_000]))
PAYLOADS = st.binary(max_size=24)
VALID_ZSTD = zstandard.ZstdCompressor().compress(b'{"fired": true}')
POLICIES = st.one_of(st.none(), st.fixed_dictionaries({
    "fireBatch": st.integers(1, 3),
    "fireMaxBytes": st.integers(1, 64),
    "maxAttempts": st.integers(1, 3),
    "backoffMinMs": st.integers(1, 2000),
    "backoffMaxMs": st.integers(1000, 4000),
    "transientBackoffMs": st.integers(1, 2000),
}))
KV_VALUES = st.one_of(st.integers(-5, 5), st.text(max_size=4), st.binary(max_size=4))
QUEUE_OPTIONS = st.dictionaries(
    st.sampled_from(["leaseTime", "retryLimit", "deadLetterQueue", "dedupWindowSeconds",
                     "delayedProcessing", "maxPayloadBytes", "maxSize", "retentionSeconds",
                     "encryptionEnabled", "notAnOption"]),
    st.one_of(st.integers(0, 5), st.booleans(), st.just(-1)),
    max_size=3,
)


class EntryMaker:
    """Mints the proposer-side values (ids, clock) of one generated history."""

    def __init__(self, draw):
        self.draw = draw
        self.serial = 0
        self.wall = START_WALL_MS
        self.txns = []
        self.lease_ids = []
        # (leaseId, queue, partition, consumerGroup) of the last pop
        self.last_pop = None
        # Ack commands and transactions sent so far, for a client's retry of one of them: the
        # retry of an ack that released its lease answers from the broker's memory of it.
        self.sent = []

    def mint(self, prefix):
        self.serial += 1
        return f"{prefix}-{self.serial:05d}"

    def now(self):
        self.wall += self.draw(CLOCK_STEPS)
        return self.wall

    def txn(self):
        if self.txns and self.draw(st.booleans()):
            return self.draw(st.sampled_from(self.txns))
        txn = self.mint("tx")
        self.txns.append(txn)
        return txn

    def push_item(self):
        return {"queue": self.draw(st.sampled_from(QUEUES)),
                "partition": self.draw(st.sampled_from(PARTITIONS)),
                "payload": self.draw(PAYLOADS), "transactionId": self.txn(),
                "messageId": self.mint("m"), "traceId": self.draw(st.sampled_from([None, "tr"])),
                "encrypted": False}

    def timer_message_id(self):
        """A messageId as the API mints it (canonical UUID text, stored compactly by the state),
        its uppercase form, or any other text (both stored as given)."""
        serial = self.mint("m")
        kind = self.draw(st.sampled_from(["text", "uuid", "uuid", "upper"]))
        if kind == "text":
            return serial
        text = str(uuid.UUID(int=self.draw(st.integers(0, (1 << 128) - 1))))
        return text.upper() if kind == "upper" else text

    def timer_ops(self):
        keys = self.draw(st.lists(st.tuples(st.sampled_from(QUEUES), st.sampled_from(TIMER_KEYS)),
                                  min_size=1, max_size=MAX_OPS, unique=True))
        ops = []
        for queue, key in keys:
            if self.draw(st.integers(0, 3)) == 0:
                ops.append({"op": "cancel", "queue": queue, "timerKey": key,
                            "txn": self.draw(st.sampled_from([None, "echo"]))})
                continue
            zstd = self.draw(st.sampled_from(["plain", "plain", "valid", "broken"]))
            payload = VALID_ZSTD if zstd == "valid" else self.draw(PAYLOADS)
            ops.append({"op": self.draw(st.sampled_from(["schedule", "reschedule"])),
                        "queue": queue, "timerKey": key,
                        "partition": self.draw(st.sampled_from(PARTITIONS)),
                        "delayMs": self.draw(st.integers(-1000, 5000)),
                        "txn": key if self.draw(st.integers(0, 3)) == 0 else self.txn(),
                        "messageId": self.timer_message_id(), "payload": payload,
                        "payloadZstd": zstd != "plain", "encrypted": False})
        return ops

    def ack_items(self):
        items = []
        for _ in range(self.draw(st.integers(1, MAX_OPS))):
            item = {"queue": self.draw(st.sampled_from(QUEUES)),
                    "partition": self.draw(st.sampled_from(PARTITIONS)),
                    "status": self.draw(st.sampled_from(["completed", "failed", "retry", "dlq"]))}
            if self.draw(st.booleans()):
                item["offset"] = self.draw(st.integers(0, 4))
            else:
                item["transactionId"] = self.draw(st.sampled_from(self.txns or ["tx-none"]))
            items.append(item)
        return items

    def ack_of_last_pop(self, now):
        """A consumer settling what the last pop delivered: the history cannot know which offsets
        those were, so it acks every low offset of the pop's partition (the ones the lease does
        not cover are refused), which releases the lease when its batch is among them."""
        lease_id, queue, partition, group = self.last_pop
        partition = partition or self.draw(st.sampled_from(PARTITIONS))
        statuses = st.sampled_from(["completed", "completed", "retry", "failed", "dlq"])
        items = [{"queue": queue, "partition": partition, "offset": offset,
                  "status": self.draw(statuses)} for offset in range(ACKED_OFFSETS)]
        return {"op": "ack", "now": now, "consumerGroup": group, "leaseId": lease_id,
                "acknowledgments": items}

    def lease_id(self):
        return self.draw(st.sampled_from(self.lease_ids + ["lease-unknown"]))

    def kv_ops(self):
        ops = []
        for _ in range(self.draw(st.integers(1, MAX_OPS))):
            ops.append({"op": self.draw(st.sampled_from(
                            ["get", "put", "putIfAbsent", "delete", "incr", "check"])),
                        "ns": self.draw(st.sampled_from(KV_NAMESPACES)),
                        "key": self.draw(st.sampled_from(KV_KEYS)),
                        "value": self.draw(KV_VALUES),
                        "ttlSeconds": self.draw(st.one_of(st.none(), st.integers(1, 5))),
                        "by": self.draw(st.integers(-2, 3)),
                        "expectedVersion": self.draw(st.one_of(st.none(), st.integers(0, 3)))})
        return ops

    def consume(self):
        """A consumer's round: a push, a pop of that partition and an ack of what it delivered
        (then, often, a `retry_sent` of that ack releases nothing new: the memory answers)."""
        push_item = self.push_item()
        queue, partition = push_item["queue"], push_item["partition"]
        push = {"op": "push", "now": self.now(), "producerSub": PRODUCER, "items": [push_item]}
        lease_id = self.mint("lease")
        self.lease_ids.append(lease_id)
        self.last_pop = (lease_id, queue, partition, self.draw(st.sampled_from(CONSUMER_GROUPS)))
        pop = {"op": "pop", "now": self.now(), "queue": queue, "partition": partition,
               "consumerGroup": self.last_pop[3], "batch": self.draw(st.integers(1, 3)),
               "leaseId": lease_id, "autoAck": False}
        ack = self.ack_of_last_pop(self.now())
        self.sent.append(ack)
        return [push, pop, ack]

    def entry(self):
        kind = self.draw(st.sampled_from([
            "timers", "timers", "tick", "tick", "push", "push", "pop", "pop", "ack", "ack",
            "retry_sent", "lease_extend", "configure", "kv", "transaction", "dlq_replay", "admin",
            "barrier"]))
        now = self.now()
        if kind == "timers":
            return {"op": "timers", "now": now, "producerSub": PRODUCER,
                    "maxPending": self.draw(st.one_of(st.none(), st.integers(0, 5))),
                    "policy": self.draw(POLICIES) or {}, "ops": self.timer_ops()}
        if kind == "tick":
            return {"op": "tick", "now": now, "policy": self.draw(POLICIES) or {}}
        if kind == "push":
            return {"op": "push", "now": now, "producerSub": PRODUCER,
                    "items": [self.push_item() for _ in range(self.draw(st.integers(1, MAX_OPS)))]}
        if kind == "pop":
            lease_id = self.mint("lease")
            self.lease_ids.append(lease_id)
            command = {"op": "pop", "now": now, "queue": self.draw(st.sampled_from(QUEUES)),
                       "partition": self.draw(st.one_of(st.none(), st.sampled_from(PARTITIONS))),
                       "consumerGroup": self.draw(st.sampled_from(CONSUMER_GROUPS)),
                       "batch": self.draw(st.integers(1, 3)), "leaseId": lease_id,
                       "autoAck": self.draw(st.booleans())}
            self.last_pop = (lease_id, command["queue"], command["partition"],
                             command["consumerGroup"])
            return command
        if kind == "ack":
            # Half of them complete what the last pop delivered, in order, so leases get released
            # by their acks (offsets drawn at random rarely cover a whole lease).
            if self.last_pop is not None and self.draw(st.booleans()):
                command = self.ack_of_last_pop(now)
            else:
                command = {"op": "ack", "now": now,
                           "consumerGroup": self.draw(st.sampled_from(CONSUMER_GROUPS)),
                           "leaseId": self.lease_id(), "acknowledgments": self.ack_items()}
            self.sent.append(command)
            return command
        if kind == "retry_sent":
            if not self.sent:
                return {"op": "barrier", "now": now}
            retried = dict(self.draw(st.sampled_from(self.sent)))
            retried["now"] = now
            return retried
        if kind == "lease_extend":
            return {"op": "lease_extend", "now": now, "leaseId": self.lease_id(),
                    "seconds": self.draw(st.integers(1, 10))}
        if kind == "configure":
            return {"op": "configure", "now": now, "queue": self.draw(st.sampled_from(QUEUES)),
                    "options": self.draw(QUEUE_OPTIONS),
                    "mode": self.draw(st.sampled_from(["merge", "replace"]))}
        if kind == "kv":
            return {"op": "kv", "now": now, "ops": self.kv_ops()}
        if kind == "transaction":
            # Without a push, nothing but the ack refuses a retry of the whole transaction.
            operations = [{"type": "push", **self.push_item()}] if self.draw(st.booleans()) else []
            sent_acks = [command for command in self.sent if command["op"] == "ack"]
            if sent_acks and self.draw(st.booleans()):
                # An item some ack already sent: its lease may be live, expired or released.
                sent = self.draw(st.sampled_from(sent_acks))
                ack = self.draw(st.sampled_from(sent["acknowledgments"]))
                operations.append({"type": "ack", "consumerGroup": sent["consumerGroup"],
                                   "leaseId": sent["leaseId"], **ack})
            elif self.lease_ids and self.draw(st.booleans()):
                ack = self.ack_items()[0]
                operations.append({"type": "ack", "consumerGroup": None,
                                   "leaseId": self.lease_id(), **ack})
            command = {"op": "transaction", "now": now, "producerSub": PRODUCER,
                       "maxPending": self.draw(st.one_of(st.none(), st.integers(0, 5))),
                       "operations": operations,
                       "kv": self.kv_ops() if self.draw(st.booleans()) else [],
                       "timers": self.timer_ops() if self.draw(st.booleans()) else []}
            self.sent.append(command)
            return command
        if kind == "dlq_replay":
            return {"op": "dlq_replay", "now": now, "dlqId": self.draw(st.sampled_from(
                        ["dlq-unknown", "0", "1"])), "messageId": self.mint("m")}
        if kind == "admin":
            return {"op": "admin", "now": now,
                    "action": self.draw(st.sampled_from(["pause", "resume"]))}
        return {"op": "barrier", "now": now}


@st.composite
def histories(draw):
    maker = EntryMaker(draw)
    history = []
    for _ in range(draw(st.integers(1, MAX_COMMANDS))):
        if draw(st.integers(0, 7)) == 0:
            history.extend(maker.consume())
        else:
            history.append(maker.entry())
    return [msgpack.packb(entry, use_bin_type=True) for entry in history]


def apply_entry(state, entry):
    """What the Raft layer does: decode a fresh copy of the entry and apply it."""
    return state.apply(msgpack.unpackb(entry, raw=False))


def observable(state):
    clock = state.clock() if callable(state.clock) else state.clock
    return {"clock": clock, "nextDueAt": state.next_due_at(), "counters": state.counters()}


@SEQUENCE_SETTINGS
@given(history=histories())
def test_two_replicas_answer_alike_and_snapshot_identical_bytes(history):
    first, second = TenantState(), TenantState()
    for index, entry in enumerate(history):
        answer_first = apply_entry(first, entry)
        answer_second = apply_entry(second, entry)
        assert answer_first == answer_second, (index, msgpack.unpackb(entry, raw=False))
        assert first.snapshot() == second.snapshot(), (index, msgpack.unpackb(entry, raw=False))
        first.check_invariants()
    assert observable(first) == observable(second)


@SEQUENCE_SETTINGS
@given(history=histories(), data=st.data())
def test_snapshot_restore_and_continue_is_the_same_as_never_snapshotting(history, data):
    cut = data.draw(st.integers(0, len(history)), label="snapshot after this many entries")
    straight = TenantState()
    answers_straight = [apply_entry(straight, entry) for entry in history]

    before_cut = TenantState()
    for entry in history[:cut]:
        apply_entry(before_cut, entry)
    image = before_cut.snapshot()
    restored = TenantState.restore(image)
    # The image is the whole state: restoring and snapshotting again gives the same bytes.
    assert restored.snapshot() == image
    answers_restored = [apply_entry(restored, entry) for entry in history[cut:]]

    assert answers_restored == answers_straight[cut:]
    assert restored.snapshot() == straight.snapshot()
    assert observable(restored) == observable(straight)


@SEQUENCE_SETTINGS
@given(history=histories(), data=st.data())
def test_taking_a_snapshot_changes_nothing(history, data):
    """The leader snapshots while it keeps applying (pysyncobj's forked dump): a snapshot must
    be a pure read."""
    snap_points = data.draw(st.sets(st.integers(0, len(history) - 1)), label="snapshot before")
    plain, snapshotted = TenantState(), TenantState()
    for index, entry in enumerate(history):
        if index in snap_points:
            snapshotted.snapshot()
        assert apply_entry(snapshotted, entry) == apply_entry(plain, entry), index
    assert snapshotted.snapshot() == plain.snapshot()
