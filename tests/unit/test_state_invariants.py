"""TenantState.check_invariants (queen_raft/state/invariants.py): silent on a state built by real
entries, and it names each kind of corruption it is there to catch, made by hand below."""

from __future__ import annotations

import msgpack
import pytest

from queen_raft.state import TenantState
from queen_raft.state.fired_memory import F_WHERE
from queen_raft.state.invariants import InvariantViolation
from queen_raft.state.timer_entries import entry_of, name_bytes, queue_and_key, timer_of
from queen_raft.state.timers import T_KEY, T_QUEUE, T_UPDATED_AT

NOW = 1_700_000_000_000


def schedule(key: str, delay_ms: int, queue: str = "q") -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default", "delayMs": delay_ms,
            "txn": f"tx-{key}", "messageId": f"m-{key}", "payload": b"p", "payloadZstd": False, "encrypted": False}


def busy_state() -> TenantState:
    """Pending timers in two queues, fired ones, a live lease, a DLQ row, a kv entry with a TTL."""
    state = TenantState()
    answers = [
        state.apply({"op": "configure", "now": NOW, "queue": "q", "options": {"retryLimit": 0}, "mode": "merge"}),
        state.apply({"op": "timers", "now": NOW, "producerSub": "s", "maxPending": None,
                     "ops": [schedule("a", 0), schedule("b", 0), schedule("c", 0), schedule("later", 60_000),
                             schedule("x", 5_000, queue="other")]}),
        state.apply({"op": "pop", "now": NOW + 1, "queue": "q", "partition": None, "consumerGroup": None,
                     "batch": 2, "leaseId": "lease-1", "autoAck": False}),
        state.apply({"op": "pop", "now": NOW + 2, "queue": "q", "partition": None, "consumerGroup": "g",
                     "batch": 1, "leaseId": "lease-2", "autoAck": False}),
        state.apply({"op": "ack", "now": NOW + 3, "consumerGroup": "g", "leaseId": "lease-2",
                     "acknowledgments": [{"queue": "q", "partition": "Default", "offset": 0, "status": "failed"}]}),
        state.apply({"op": "kv", "now": NOW + 4, "ops": [{"op": "put", "ns": "n", "key": "k", "value": 1,
                                                          "ttlSeconds": 60}]}),
    ]
    assert not [a for a in answers if "error" in a], answers
    assert state.broker.leases and state.broker.dlq_index and state.timers.count == 2
    assert len(state.fired_memory) == 3
    return state


def test_a_state_built_by_entries_and_its_restored_copy_hold_every_invariant():
    state = busy_state()
    state.check_invariants()
    TenantState.restore(state.snapshot()).check_invariants()
    TenantState().check_invariants()


def drop_from_due_index(state):
    state.timers.due.remove(state.timers.due[0])


def drop_from_key_index(state):
    keys = state.timers.keys["q"]
    keys.remove(keys[0])


def miscount_timers(state):
    state.timers.count += 1


def leave_a_timer_staged(state):
    state.timers._staged_due.append(state.timers.due[0])


def replace_a_timer_in_its_key_map_only(state):
    timer = timer_of(state.timers.due[0])
    state.timers.by_queue[timer[T_QUEUE]][timer[T_KEY]] = entry_of(timer[:T_UPDATED_AT] + (timer[T_UPDATED_AT] + 1,))


def store_an_entry_in_a_second_encoding(state):
    """The same timer, its default partition spelled out instead of nil: it decodes alike, but two
    replicas holding it in different bytes would write different snapshots."""
    entry = state.timers.due[0]
    queue, key = queue_and_key(entry)
    start = 8 + len(name_bytes(queue)) + len(name_bytes(key))
    fields = list(msgpack.unpackb(entry[start:], raw=False))
    assert fields[0] is None
    fields[0] = "Default"
    wrong = entry[:start] + msgpack.packb(fields, use_bin_type=True)
    state.timers.due.remove(entry)
    state.timers.due.add(wrong)
    state.timers.by_queue[queue][key] = wrong


def miscount_pushed(state):
    state.broker.pushed -= 1


def forget_a_lease_in_the_broker(state):
    state.broker.leases.clear()


def lease_a_settled_offset(state):
    group = state.broker.queues["q"].partitions["Default"].groups["__QUEUE_MODE__"]
    group.settled.add(max(group.lease.pending))


def dedup_names_another_message(state):
    dedup = state.broker.queues["q"].partitions["Default"].dedup
    offset, message_id, expires_at = dedup["tx-a"]
    dedup["tx-a"] = (offset + 1, message_id, expires_at)


def unqueue_a_dedup_expiry(state):
    state.broker.queues["q"].partitions["Default"].dedup_expiry.clear()


def drop_a_dlq_index_entry(state):
    state.broker.dlq_index.clear()


def miscount_remembered_settlements(state):
    state.broker.released.settlements += 1


def unindex_a_kv_expiry(state):
    state.kv.expiry.clear()


def point_a_fire_at_another_offset(state):
    memory = state.fired_memory
    memory.index_tail()
    record = memory.by_queue["q"]["a"]
    moved = record[:F_WHERE] + (record[F_WHERE] + 1,) + record[F_WHERE + 1:]
    memory.order[memory.order.index(record)] = memory.by_queue["q"]["a"] = moved


def answer_from_a_record_outside_the_order(state):
    memory = state.fired_memory
    memory.index_tail()
    memory.order.popleft()  # its key still answers from it
    memory.indexed -= 1


def file_a_fire_under_another_key(state):
    state.fired_memory.index_tail()
    answers = state.fired_memory.by_queue["q"]
    answers["a"] = answers["b"]


@pytest.mark.parametrize("corrupt", [
    drop_from_due_index, drop_from_key_index, miscount_timers, leave_a_timer_staged,
    replace_a_timer_in_its_key_map_only, store_an_entry_in_a_second_encoding, miscount_pushed, forget_a_lease_in_the_broker,
    lease_a_settled_offset, dedup_names_another_message, unqueue_a_dedup_expiry,
    drop_a_dlq_index_entry, miscount_remembered_settlements, unindex_a_kv_expiry,
    point_a_fire_at_another_offset, answer_from_a_record_outside_the_order, file_a_fire_under_another_key,
])
def test_each_corruption_is_caught(corrupt):
    state = busy_state()
    corrupt(state)
    with pytest.raises(InvariantViolation):
        state.check_invariants()
