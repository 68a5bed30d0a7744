"""The adaptive fire batch against the state: a leader that sizes each tick's `policy.fireBatch`
by queen_raft.raft.fire_batch (doubling during a backlog, back to the base once it clears), with
older ticks that carry no policy mixed in, and schedules arriving between the ticks. Properties:

- fires happen in (dueAt, queue, timerKey) order, each tick taking exactly the due prefix a
  reference model takes under that tick's bounds (so nothing is skipped nor taken twice);
- every tick stays within its entry's bounds: at most `fireBatch` timers, and at most
  `fireMaxBytes` of payload unless it fired a single timer;
- replicas applying the same entries (each its own msgpack-decoded copy, one of them restored from
  a snapshot part-way) hold identical states: equal snapshot bytes after every entry.
"""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.raft.fire_batch import FireBatchBounds, next_fire_batch
from queen_raft.state import TenantState
from queen_raft.state.fired_memory import F_FIRED_AT, F_KEY, F_QUEUE
from queen_raft.state.limits import MAX_FIRE_BATCH, MAX_FIRE_BYTES

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

QUEUES = ["q0", "q1", "q2"]
KEYS = [f"k{i:02d}" for i in range(24)] + ["tenant/42", "é"]
START_WALL_MS = 1_700_000_000_000
MAX_STEPS = 30


def shipped(value):
    """What a replica decodes from the entry: its own copy of every object."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


class Model:
    """Pending timers by (queue, key) -> (dueAt, payload size); a tick takes the due prefix in
    (dueAt, queue, timerKey) order within its bounds, at least one timer."""

    def __init__(self):
        self.pending = {}

    def schedule(self, queue, key, due_at, size):
        self.pending[(queue, key)] = (due_at, size)

    def tick(self, now, batch, max_bytes):
        due = sorted((due_at, queue, key) for (queue, key), (due_at, _) in self.pending.items() if due_at <= now)
        taken, total = [], 0
        for due_at, queue, key in due[:batch]:
            size = self.pending[(queue, key)][1]
            if taken and total + size > max_bytes:
                break
            total += size
            taken.append((queue, key))
        for name in taken:
            del self.pending[name]
        return taken, len(due) > len(taken)


schedule_op = st.tuples(st.sampled_from(QUEUES), st.sampled_from(KEYS), st.integers(1, 40), st.integers(0, 48))
steps = st.lists(st.one_of(
    st.tuples(st.just("timers"), st.integers(0, 15), st.lists(schedule_op, min_size=1, max_size=12,
                                                               unique_by=lambda op: (op[0], op[1]))),
    st.tuples(st.just("tick"), st.integers(1, 30), st.booleans()),  # (now step, an older tick)
), min_size=1, max_size=MAX_STEPS)


def schedule_command(now, ops):
    return {"op": "timers", "now": now, "producerSub": "p", "maxPending": None,
            "ops": [{"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default",
                     "delayMs": delay, "txn": f"{key}@{now}", "messageId": f"m-{queue}-{key}-{now}",
                     "payload": b"x" * size, "payloadZstd": False, "encrypted": False}
                    for queue, key, delay, size in ops]}


@SEQUENCE_SETTINGS
@given(base=st.integers(1, 4), growth=st.integers(0, 3), max_bytes=st.integers(0, 120), steps=steps,
       restore_at=st.integers(0, MAX_STEPS))
def test_adaptive_ticks_fire_in_order_within_bounds_and_replicas_agree(base, growth, max_bytes, steps, restore_at):
    bounds = FireBatchBounds(base, base << growth)
    replicas = [TenantState(), TenantState()]
    model = Model()
    batch, now = bounds.base, START_WALL_MS
    for index, step in enumerate(steps):
        if index == restore_at:  # a replica that joins from a snapshot applies the rest alike
            replicas[1] = TenantState.restore(replicas[1].snapshot())
        now += step[1]
        if step[0] == "timers":
            command = schedule_command(now, step[2])
            for queue, key, delay, size in step[2]:
                model.schedule(queue, key, now + delay, size)
        elif step[2]:  # an older tick: no policy, the state's default bounds
            command = {"op": "tick", "now": now}
        else:
            command = {"op": "tick", "now": now, "policy": {"fireBatch": batch, "fireMaxBytes": max_bytes}}
        answers = [replica.apply(shipped(command)) for replica in replicas]
        assert answers[0] == answers[1]
        assert "error" not in answers[0], answers[0]
        assert replicas[0].snapshot() == replicas[1].snapshot()
        if command["op"] != "tick":
            continue
        policy = command.get("policy", {"fireBatch": MAX_FIRE_BATCH, "fireMaxBytes": MAX_FIRE_BYTES})
        want, more_due = model.tick(now, policy["fireBatch"], policy["fireMaxBytes"])
        # Every tick moves the clock on and a schedule never fires in its own entry (delay >= 1),
        # so the records stamped with this tick's now are its fires, in fire order.
        fired = [(record[F_QUEUE], record[F_KEY]) for record in replicas[0].fired_memory.order
                 if record[F_FIRED_AT] == now]
        assert fired == want  # the (dueAt, queue, timerKey) prefix, within the bounds
        assert answers[0]["fired"] == len(want) <= policy["fireBatch"]
        assert answers[0]["moreDue"] == more_due
        if "policy" in command:
            batch = next_fire_batch(bounds, batch, policy["fireBatch"], answers[0]["fired"], more_due)
            assert bounds.base <= batch <= bounds.ceiling


@SEQUENCE_SETTINGS
@given(sizes=st.lists(st.integers(0, 64), min_size=1, max_size=60), max_bytes=st.integers(0, 200),
       batch=st.integers(1, 16))
def test_one_tick_stays_within_its_count_and_byte_bounds(sizes, max_bytes, batch):
    state = TenantState()
    ops = [("q0", f"k{i:03d}", 1, size) for i, size in enumerate(sizes)]
    state.apply(schedule_command(START_WALL_MS, ops))
    answer = state.apply({"op": "tick", "now": START_WALL_MS + 1,
                          "policy": {"fireBatch": batch, "fireMaxBytes": max_bytes}})
    fired = answer["fired"]
    assert 1 <= fired <= batch
    assert fired == 1 or sum(sizes[:fired]) <= max_bytes
    # Maximal: the next timer would have passed a bound.
    assert fired == min(batch, len(sizes)) or sum(sizes[:fired + 1]) > max_bytes
