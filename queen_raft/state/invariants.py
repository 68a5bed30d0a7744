"""What must hold of a TenantState between two entries, checked whole: every index agrees with the
collection it indexes, and every counter with what it counts.

Each state keeps the same facts twice for speed (a timer is in its queue's key map, in the key
index and in the due index; a lease is in the broker's map and on its group's cursor); a bug that
updates one copy and not the other answers wrongly only later, on some other call. These checks
find such a bug at the entry that made it. They walk the whole state (O(n)), so they run in the
tests (after every step of the model test, tests/property/test_state_model.py), never on the
apply path. They raise InvariantViolation, always (not `assert`, which `python -O` drops).
"""

from __future__ import annotations

from itertools import pairwise

from . import limits
from .broker import Broker
from .dlq_pages import dlq_seq_of
from .fired_memory import (
    F_EXPIRES_AT, F_FIRED_AT, F_KEY, F_MESSAGE_ID, F_PARTITION, F_QUEUE, F_TXN, F_WHERE, RECORD_FIELDS,
    FiredMemory,
)
from .partition import MSG_CREATED_AT, MSG_ID, MSG_TXN, Partition, expiry_txns
from .timer_entries import entry_of, timer_of
from .timers import R_DELIVER_AT, T_CREATED_AT, T_DUE_AT, T_KEY, T_QUEUE, T_RETRY, T_UPDATED_AT, \
    TIMER_FIELDS, TimerTable


class InvariantViolation(AssertionError):
    """The state broke one of its invariants: a bug in queen_raft.state, never bad input."""


def require(condition: object, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)


def check_timer_table(table: TimerTable, clock: int) -> None:
    """The due index, the key maps and the key index hold the same timers; `count` counts them."""
    require(not table._staged_due and not table._staged_keys, "timers left staged after an entry")
    in_maps = sum(len(timers) for timers in table.by_queue.values())
    require(table.count == len(table.due) == in_maps,
            f"timer count {table.count}, due index {len(table.due)}, key maps {in_maps}")
    for entry in table.due:
        timer = timer_of(entry)
        queue, key = timer[T_QUEUE], timer[T_KEY]
        require(table.by_queue.get(queue, {}).get(key) is entry,
                f"due index holds {queue}/{key}, which its queue's key map does not")
        require(entry_of(timer) == entry, f"the entry of {queue}/{key} does not encode its timer")
        check_timer(timer, clock)
    for earlier, later in pairwise(table.iter_due()):
        require(earlier[:3] < later[:3], f"due index out of order or repeated at {later[:3]}")
    require(table.keys.keys() == table.by_queue.keys(), "key index and key maps name different queues")
    for queue, timers in table.by_queue.items():
        require(timers, f"queue {queue!r} has an empty key map")
        require(list(table.keys[queue]) == sorted(timers), f"key index of {queue!r} differs from its key map")
    require(table.next_due_at() == (timer_of(table.due[0])[T_DUE_AT] if table.due else None), "next_due_at")


def check_timer(timer: tuple, clock: int) -> None:
    require(len(timer) == len(TIMER_FIELDS), f"timer of {len(timer)} fields")
    retry = timer[T_RETRY]
    if retry is not None:
        require(len(retry) == 3, "retry field of a failed timer is (attempts, lastError, deliverAt)")
        require(retry[R_DELIVER_AT] <= timer[T_DUE_AT], "a failed timer is due before its deliverAt")
    require(timer[T_CREATED_AT] <= timer[T_UPDATED_AT] <= clock, "timer stamps after the group clock")


def check_partition(partition: Partition, clock: int) -> None:
    """Offsets, dedup window and cursors of one partition agree with its log."""
    base, end, log = partition.base, partition.end, partition.log
    require(base >= 0, "negative base")
    require(all(a[MSG_CREATED_AT] <= b[MSG_CREATED_AT] for a, b in pairwise(log)),
            f"{partition.name}: createdAt decreases along the log")
    require(not log or log[-1][MSG_CREATED_AT] <= clock, f"{partition.name}: a message after the group clock")
    queued = {(expires_at, txn) for expires_at, txns in partition.dedup_expiry for txn in expiry_txns(txns)}
    for txn, (offset, message_id, expires_at) in partition.dedup.items():
        require(offset < end, f"{partition.name}: dedup entry of {txn!r} past the log's end")
        if offset >= base:
            message = log[offset - base]
            require((message[MSG_TXN], message[MSG_ID]) == (txn, message_id),
                    f"{partition.name}: dedup entry of {txn!r} names another message")
        # Unqueued, it would never be pruned: the index would outgrow one window.
        require((expires_at, txn) in queued, f"{partition.name}: dedup entry of {txn!r} has no queued expiry")
    for name, group in partition.groups.items():
        where = f"{partition.name}/{name}"
        require(base <= group.cursor <= end, f"{where}: cursor {group.cursor} outside [{base}, {end}]")
        require(all(group.cursor < offset < end for offset in group.settled), f"{where}: settled offsets")
        for counted in (group.deliveries, group.failures):
            require(all(group.cursor <= offset < end for offset in counted), f"{where}: counts below the cursor")
        lease = group.lease
        if lease is not None:
            require(lease.partition == partition.name and lease.group == name, f"{where}: lease elsewhere")
            require(lease.pending, f"{where}: a lease with nothing pending is not released")
            require(all(group.cursor <= o < end and o not in group.settled for o in lease.pending),
                    f"{where}: a lease covers a settled offset")


def check_broker(broker: Broker, clock: int) -> None:
    """Queues, leases, the DLQ index and the ack memory agree; `pushed` counts every offset given."""
    offsets_given = 0
    group_leases = {}
    dlq_ids = {}
    for name, queue in broker.queues.items():
        require(queue.name == name, f"queue {name!r} filed under another name")
        require(queue.partition_names == sorted(queue.partitions), f"{name}: partition names")
        for partition in queue.partitions.values():
            check_partition(partition, clock)
            offsets_given += partition.end
            group_leases.update({g.lease.lease_id: g.lease for g in partition.groups.values() if g.lease})
        dlq_ids.update(dict.fromkeys(queue.dlq, name))
    # Offsets are gapless from 0 and never reused: the ends add up to every append ever made.
    require(broker.pushed == offsets_given, f"pushed {broker.pushed}, offsets given {offsets_given}")
    require(broker.leases.keys() == group_leases.keys() and
            all(broker.leases[i] is lease for i, lease in group_leases.items()),
            "the broker's leases and the cursors' leases differ")
    require(broker.dlq_index == dlq_ids, "the DLQ index and the queues' DLQ rows differ")
    require(all(dlq_seq_of(i) <= broker.dlq_seq for i in dlq_ids), "a DLQ id past dlq_seq")
    released = broker.released
    require(list(released.order) == list(released.by_id), "released leases out of release order")
    remembered = sum(len(lease.settled_as) for lease in released.by_id.values())
    require(released.settlements == remembered <= limits.MAX_REMEMBERED_SETTLEMENTS,
            f"released settlements {released.settlements}, remembered {remembered}")


def check_fired_memory(memory: FiredMemory, broker: Broker, clock: int) -> None:
    """The records are in fire order within the count bound; every answering record is in the order
    and filed under its own key; every fire names a message the log holds (or held, below its base)
    with that txn and messageId, every dead letter a DLQ row of its queue."""
    order = memory.order
    require(len(memory) <= limits.MAX_REMEMBERED_FIRES, f"{len(memory)} fires remembered, over the bound")
    require(0 <= memory.indexed <= len(memory), f"{memory.indexed} of {len(memory)} fire records filed")
    memory.index_tail()  # the key maps are lazy (fired_memory.py): check them whole
    require(len(order) == len(memory), f"{len(order)} fire records kept, {len(memory)} counted")
    require(all(len(record) == len(RECORD_FIELDS) for record in order), "a fire record of another shape")
    require(all(a[F_FIRED_AT] <= b[F_FIRED_AT] for a, b in pairwise(order)), "fire records out of fire order")
    require(all(r[F_FIRED_AT] < r[F_EXPIRES_AT] and r[F_FIRED_AT] <= clock for r in order),
            "a fire record after the group clock, or expiring at its fire")
    in_order = set(map(id, order))
    for queue, answers in memory.by_queue.items():
        require(answers, f"fired memory: queue {queue!r} has an empty key map")
        for key, record in answers.items():
            require(id(record) in in_order, f"fired memory: {queue}/{key} answers from a record not in the order")
            require((record[F_QUEUE], record[F_KEY]) == (queue, key), f"fired memory: {queue}/{key} filed elsewhere")
            check_fire_record(record, broker)


def check_fire_record(record: tuple, broker: Broker) -> None:
    queue = broker.queues.get(record[F_QUEUE])
    where, name = record[F_WHERE], f"{record[F_QUEUE]}/{record[F_KEY]}"
    require(queue is not None, f"fired memory: {name} fired into a queue that does not exist")
    if type(where) is not int:
        row = queue.dlq.get(where)
        require(row is None or (row["timerKey"], row["transactionId"]) == (record[F_KEY], record[F_TXN]),
                f"fired memory: {name} names DLQ row {where!r} of another timer")
        return
    partition = queue.partitions.get(record[F_PARTITION])
    require(partition is not None and 0 <= where < partition.end,
            f"fired memory: {name} names offset {where} past its partition's log")
    if where >= partition.base:
        message = partition.log[where - partition.base]
        require((message[MSG_TXN], message[MSG_ID]) == (record[F_TXN], record[F_MESSAGE_ID]),
                f"fired memory: {name} names offset {where}, which holds another message")


def check_tenant_state(state) -> None:
    """Every invariant of a TenantState (see the module docstring)."""
    require(all(count >= 0 for count in state.fired.values()), "fired counters")
    require(state.billed >= 0, "billed counter")
    check_timer_table(state.timers, state.clock)
    check_broker(state.broker, state.clock)
    check_fired_memory(state.fired_memory, state.broker, state.clock)
    kv = state.kv
    require(len(kv.expiry) >= sum(entry[2] is not None for entry in kv.entries.values()), "kv expiry index")
    for (ns, key), (_, version, expires_at) in kv.entries.items():
        require(version >= 1, f"kv {ns}/{key}: version {version}")
        require(expires_at is None or (expires_at, ns, key) in kv.expiry, f"kv {ns}/{key}: expiry not indexed")
