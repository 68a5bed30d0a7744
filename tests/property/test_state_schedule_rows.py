"""A `timers` command's schedules as schedule_rows groups (docs/commands.md) are the same schedules
as maps: two replicas, one fed every entry with its schedules as maps, the other with each run of
schedules cut into groups at random places, give the same answers (results, refusals with their
index) and the same snapshot bytes after every entry, through fires, failures, backoffs,
reschedules, cancels, the quota, pauses, transactions and restarts from a snapshot.
"""

import msgpack
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.state import TenantState
from queen_raft.state.timer_ops import ROW_FIELDS
from queen_raft.state.timers import T_KEY, T_TXN

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1", "q2"]
PARTITIONS = ["Default", "p1"]
TIMER_KEYS = ["k0", "k1", "k2", "k3", "tenant/42", "é"]
START_WALL_MS = 1_700_000_000_000
MAX_ENTRIES = 25
# Enough ops to form several groups and cross group boundaries with duplicates and cancels.
MAX_OPS = 8
CLOCK_STEPS = st.one_of(st.just(0), st.integers(1, 3000), st.integers(-2000, -1), st.just(3_600_000))
VALID_ZSTD = zstandard.ZstdCompressor().compress(b'{"fired": true}')
# Mostly valid fields; sometimes one the state must refuse (it refuses the same op either way).
DELAYS = st.one_of(st.integers(-1000, 5000), st.sampled_from([0, 2**50, 2**50 + 1]))
TXNS = st.one_of(st.sampled_from(["t0", "t1"]), st.just(None), st.just(7))
MAX_PENDING = st.one_of(st.none(), st.integers(0, 8))


def shipped(value):
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


@st.composite
def timer_ops(draw):
    identities = draw(st.lists(st.tuples(st.sampled_from(QUEUES), st.sampled_from(TIMER_KEYS)),
                               min_size=1, max_size=MAX_OPS))  # not unique: duplicates are refused alike
    ops = []
    for serial, (queue, key) in enumerate(identities):
        if draw(st.integers(0, 4)) == 0:
            ops.append({"op": "cancel", "queue": queue, "timerKey": key, "txn": draw(st.sampled_from([None, "echo"]))})
            continue
        zstd = draw(st.sampled_from(["plain", "plain", "valid", "broken"]))
        txn = draw(TXNS)
        ops.append({"op": draw(st.sampled_from(["schedule", "reschedule"])), "queue": queue, "timerKey": key,
                    "partition": draw(st.sampled_from(PARTITIONS)), "delayMs": draw(DELAYS),
                    "txn": key if txn is None else txn, "messageId": f"m-{serial}-{draw(st.integers(0, 9))}",
                    "payload": VALID_ZSTD if zstd == "valid" else draw(st.binary(max_size=12)),
                    "payloadZstd": zstd != "plain", "encrypted": draw(st.booleans())})
    return ops


@st.composite
def grouped(draw, ops):
    """The ops with the schedules as groups: a run of schedules split at drawn places."""
    out = []
    for op in ops:
        if op["op"] == "cancel":
            out.append(op)
        elif out and out[-1]["op"] == "schedule_rows" and draw(st.integers(0, 3)) > 0:
            out[-1]["rows"].append([op[name] for name in ROW_FIELDS])
        else:
            out.append({"op": "schedule_rows", "rows": [[op[name] for name in ROW_FIELDS]]})
    return out


@st.composite
def histories(draw):
    wall = START_WALL_MS
    entries = []
    for _ in range(draw(st.integers(1, MAX_ENTRIES))):
        wall += draw(CLOCK_STEPS)
        kind = draw(st.sampled_from(["timers", "timers", "timers", "tick", "transaction", "admin",
                                     "configure", "restart"]))
        if kind in ("timers", "transaction"):
            ops = draw(timer_ops())
            forms = (ops, draw(grouped(ops)))
            if kind == "timers":
                base = {"op": "timers", "now": wall, "producerSub": "sub", "maxPending": draw(MAX_PENDING),
                        "policy": {"maxAttempts": 2, "backoffMinMs": 500}}
                entries.append(tuple({**base, "ops": form} for form in forms))
            else:
                base = {"op": "transaction", "now": wall, "producerSub": "sub", "maxPending": draw(MAX_PENDING),
                        "operations": [], "kv": []}
                entries.append(tuple({**base, "timers": form} for form in forms))
        elif kind == "tick":
            command = {"op": "tick", "now": wall, "policy": {"fireBatch": draw(st.integers(1, 4)),
                                                             "maxAttempts": 2, "backoffMinMs": 500}}
            entries.append((command, command))
        elif kind == "admin":
            command = {"op": "admin", "now": wall, "action": draw(st.sampled_from(["pause", "resume", "resume"]))}
            entries.append((command, command))
        elif kind == "configure":
            command = {"op": "configure", "now": wall, "queue": draw(st.sampled_from(QUEUES)), "mode": "merge",
                       "options": {"maxPayloadBytes": draw(st.sampled_from([4, 1048576])),
                                   "maxSize": draw(st.sampled_from([0, 2]))}}
            entries.append((command, command))
        else:
            entries.append("restart")
    return entries


@SEQUENCE_SETTINGS
@given(histories())
def test_groups_and_maps_give_the_same_answers_and_snapshots(history):
    maps_state, rows_state = TenantState(), TenantState()
    for entry in history:
        if entry == "restart":
            rows_state = TenantState.restore(rows_state.snapshot())
            continue
        maps_command, rows_command = entry
        maps_answer = maps_state.apply(shipped(maps_command))
        rows_answer = rows_state.apply(shipped(rows_command))
        assert rows_answer == maps_answer
        assert rows_state.snapshot() == maps_state.snapshot()
        rows_state.check_invariants()  # the rows path stages and indexes timers its own way
    for timers in rows_state.timers.by_queue.values():
        for key, timer in timers.items():  # a txn equal to the key is stored as the key's str
            assert timer[T_TXN] != key or timer[T_TXN] is timer[T_KEY]
