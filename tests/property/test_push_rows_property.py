"""A push in the rows form (docs/commands.md) is the push of the same items as maps: two replicas,
one fed every push with its items as maps, the other with the same items as rows, give the same
answers (results, refusals with their index) and the same snapshot bytes after every entry,
through duplicates inside one command and across commands, payload and size limits, dedup windows
that end, retention, pops, acks (by offset and by transactionId, repeated ones too) and restarts
from a snapshot. A follower that leaves out the answers reaches the same snapshot too.
"""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.state import TenantState
from queen_raft.state.push_rows import PUSH_ROW_FIELDS

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1"]
PARTITIONS = ["Default", "p1"]
TXNS = ["t0", "t1", "t2", "t3"]
START_WALL_MS = 1_700_000_000_000
MAX_ENTRIES = 30
CLOCK_STEPS = st.one_of(st.just(0), st.just(1000), st.integers(1, 3000), st.just(3_600_000))


def shipped(value):
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


@st.composite
def push_items(draw, serial):
    items = []
    for index in range(draw(st.integers(0, 6))):
        item = {"queue": draw(st.sampled_from(QUEUES)), "partition": draw(st.sampled_from(PARTITIONS)),
                "payload": draw(st.binary(max_size=6)), "transactionId": draw(st.sampled_from(TXNS)),
                "messageId": f"m-{serial}-{index}", "traceId": draw(st.sampled_from([None, "trace"])),
                "encrypted": draw(st.booleans())}
        if draw(st.integers(0, 15)) == 0:  # now and then a field the state must refuse
            item[draw(st.sampled_from(["queue", "payload", "transactionId", "traceId", "encrypted"]))] = 7
        items.append(item)
    return items


@st.composite
def acks(draw):
    items = []
    for _ in range(draw(st.integers(1, 5))):
        item = {"partition": draw(st.sampled_from(PARTITIONS)),
                "status": draw(st.sampled_from(["completed", "completed", "failed", "retry", "dlq"]))}
        if draw(st.booleans()):
            item["offset"] = draw(st.integers(0, 8))
        else:
            item["transactionId"] = draw(st.sampled_from(TXNS))
        items.append(item)
    return items


@st.composite
def histories(draw):
    wall = START_WALL_MS
    entries = []
    leases = []
    for serial in range(draw(st.integers(1, MAX_ENTRIES))):
        wall += draw(CLOCK_STEPS)
        kind = draw(st.sampled_from(["push", "push", "push", "pop", "ack", "ack", "configure", "restart"]))
        if kind == "push":
            items = draw(push_items(serial))
            base = {"op": "push", "now": wall, "producerSub": "sub"}
            entries.append(({**base, "items": items},
                            {**base, "rows": [[item[name] for name in PUSH_ROW_FIELDS] for item in items]}))
            continue
        if kind == "pop":
            leases.append(f"lease-{serial}")
            command = {"op": "pop", "now": wall, "queue": draw(st.sampled_from(QUEUES)), "partition": None,
                       "consumerGroup": None, "batch": draw(st.integers(1, 6)), "leaseId": leases[-1],
                       "autoAck": False}
        elif kind == "ack":
            lease = draw(st.sampled_from(leases)) if leases else "none"
            command = {"op": "ack", "now": wall, "consumerGroup": None, "leaseId": lease,
                       "acknowledgments": draw(acks())}
        elif kind == "configure":
            command = {"op": "configure", "now": wall, "queue": draw(st.sampled_from(QUEUES)), "mode": "merge",
                       "options": {"maxPayloadBytes": draw(st.sampled_from([4, 1048576])),
                                   "maxSize": draw(st.sampled_from([0, 3])),
                                   "dedupWindowSeconds": draw(st.sampled_from([0, 1, 3600])),
                                   "retentionSeconds": draw(st.sampled_from([0, 1])),
                                   "retryLimit": draw(st.sampled_from([0, 3]))}}
        else:
            entries.append("restart")
            continue
        entries.append((command, command))
    return entries


@SEQUENCE_SETTINGS
@given(histories())
def test_rows_and_maps_give_the_same_answers_and_snapshots(history):
    maps_state, rows_state, quiet_state = TenantState(), TenantState(), TenantState()
    quiet_state.answering = False  # a follower: nobody reads its answers
    for entry in history:
        if entry == "restart":
            rows_state = TenantState.restore(rows_state.snapshot())
            continue
        maps_command, rows_command = entry
        maps_answer = maps_state.apply(shipped(maps_command))
        assert rows_state.apply(shipped(rows_command)) == maps_answer
        quiet_state.apply(shipped(rows_command))
        snapshot = maps_state.snapshot()
        assert rows_state.snapshot() == snapshot
        assert quiet_state.snapshot() == snapshot
        rows_state.check_invariants()
