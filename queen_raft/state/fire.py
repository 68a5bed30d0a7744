"""The fire of due timers: each timer's message goes through the steps of the push path.

The steps of Broker.push_message are inlined for the hot path: dedup first, then the limits, and
the partition created only when a message is appended to it. A partition's `prune` runs once per
fire rather than once per timer: at a fixed `now` it is idempotent, and what a fire appends
(createdAt = now, dedup expiry now + window > now) is never prunable at `now`, so pruning again
would remove nothing. A fire that fails backs off by the policy carried in the command, and is
filed in the DLQ when it runs out of attempts.

With a FiredMemory, each fire that put its txn in a partition (appended, or a duplicate of a
message in the window) and each timer filed in the DLQ is remembered for the queue's dedup window
(fired_memory.py); the memory is trimmed once, after the whole fire. The hot path of
FiredMemory.remember is inlined too: the memory's order is bound once per fire (its key maps take
the records in when they are next asked).

A fire batch is mostly runs of one queue and one partition, so what the loop needs of them (the
queue's limits, the partition, pruned once per fire) is looked up once per run: names are interned,
so a run is told by identity, and a lookup is redone only where the name changes.

A tick's timers come as runs of one dueAt and one queue (due_runs.py), and most runs of a backlog
are appended whole: a run whose timers would all be appended (`_append_run` says when) has its
messages, dedup entries and fire records made by C loops over its columns (zip, dict.update,
list.extend), not a Python iteration per timer; any other run goes timer by timer.
"""

from __future__ import annotations

import sys
from itertools import repeat

from .broker import Broker
from .due_runs import (F_ENCRYPTED, F_MESSAGE_ID, F_PARTITION, F_PAYLOAD, F_PAYLOAD_ZSTD,
                       F_PRODUCER_SUB, F_RETRY, F_TXN, DueRun)
from .fired_memory import FiredMemory, FireRun
from .limits import DEFAULT_PARTITION, TIMER_DLQ_GROUP, TIMER_DLQ_OFFSET, FirePolicy
from .partition import Partition
from .queue import Queue
from .timers import R_ATTEMPTS, R_DELIVER_AT, Timer, TimerTable
from .zstd_bounded import decompress_bounded

# 1 << 62 exceeds any backoffMaxMs (at most 2^40), so capping the exponent here never changes the
# backoff; it only spares computing 2^attempts when a policy allows a huge maxAttempts.
MAX_BACKOFF_DOUBLINGS = 62

_intern = sys.intern


class FireTally:
    """The counts of one fire, shaped as the `tick` answer."""

    __slots__ = ("fired", "appended", "duplicate", "failed", "dlq", "lags")

    def __init__(self, fired: int = 0) -> None:
        self.fired = fired
        self.appended = self.duplicate = self.failed = self.dlq = 0
        self.lags: list[int] = []


def fire(timers: list[Timer], table: TimerTable, broker: Broker, policy: FirePolicy,
         now: int, memory: FiredMemory | None = None) -> FireTally:
    """Push each timer's message through the push path; failures go back into the table."""
    tally = FireTally(len(timers))
    _fire_each(timers, table, broker, policy, now, memory, tally, set())
    if memory is not None:
        memory.trim(now)
    return tally


def fire_runs(runs: list[DueRun], table: TimerTable, broker: Broker, policy: FirePolicy,
              now: int, memory: FiredMemory | None = None) -> FireTally:
    """`fire` of the runs' timers in order (a tick's, from TimerTable.take_due_runs): each run
    appended in bulk where it can be (`_append_run`), else timer by timer."""
    tally = FireTally(sum(map(len, runs)))
    pruned: set[Partition] = set()
    for run in runs:
        if not _append_run(run, broker, now, memory, tally, pruned):
            _fire_each(run.timers(), table, broker, policy, now, memory, tally, pruned)
    if memory is not None:
        memory.trim(now)
    return tally


def fired_by_queue(runs: list[DueRun]) -> dict[str, int]:
    """The runs' timers by queue, in the order the queues come."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.queue] = counts.get(run.queue, 0) + len(run.keys)
    return counts


def _fire_each(timers: list[Timer], table: TimerTable, broker: Broker, policy: FirePolicy, now: int,
               memory: FiredMemory | None, tally: FireTally, pruned: set[Partition]) -> None:
    """The general path, timer by timer; `pruned`: the partitions this fire has pruned already."""
    lags = tally.lags
    appended = duplicate = 0
    queue_name = partition_key = queue = partition = None
    log = dedup = expiry = None  # the partition's, bound once per run
    keep_in_order = None if memory is None else memory.remember
    for timer in timers:
        (deliver_at, name, key, partition_name, txn, message_id, payload, payload_zstd,
         encrypted, producer_sub, retry, created_at, _) = timer
        if retry is not None: deliver_at = retry[R_DELIVER_AT]  # a failed timer: deliverAt is not its dueAt
        if name is not queue_name:  # a new run of one queue (see the module docstring)
            queue_name, partition_key = name, None
            queue = broker.queues.get(name) or broker.queue(name)
            max_payload, max_size, window_ms = queue.max_payload_bytes, queue.max_size, queue.dedup_window_ms
        if partition_name is not partition_key:
            partition_key = partition_name
            partition = _pruned_partition(queue, partition_name, pruned, now)
            if partition is not None:
                log, dedup, expiry = partition.log, partition.dedup, partition.dedup_expiry
        if partition is not None:
            entry = dedup.get(txn)
            if entry is not None and entry[2] > now:  # Partition.find_duplicate
                duplicate += 1
                lags.append(now - deliver_at)
                _remember(memory, queue, timer, entry[0], entry[1], now)
                continue
        if payload_zstd:  # a str is why it does not decompress
            payload = decompress_bounded(payload, max_payload)
            error = payload if isinstance(payload, str) else queue.admit(len(payload))
        else:  # Queue.admit, its common case inlined
            error = queue.admit(len(payload)) if len(payload) > max_payload or max_size else None
        if error is None:
            if partition is None:  # created now: it holds only what this fire appends
                partition = queue.partition(partition_name)
                pruned.add(partition)
                log, dedup, expiry = partition.log, partition.dedup, partition.dedup_expiry
            # Partition.append, inlined: the message, then its dedup entry and expiry.
            offset = partition.base + len(log)
            log.append((txn, message_id, payload, now, producer_sub, None, encrypted))
            if window_ms > 0:
                expires_at = now + window_ms
                dedup[txn] = (offset, message_id, expires_at)
                expiry.append((expires_at, txn))
                if keep_in_order is not None:
                    keep_in_order((now, expires_at, name, key, partition_name, txn, offset, message_id))
            appended += 1
            lags.append(now - deliver_at)
            continue
        _retry_or_file(timer, queue, error, table, broker, policy, now, memory, tally)
    broker.pushed += appended  # Broker.append's count, once for the whole loop
    tally.appended += appended
    tally.duplicate += duplicate


def _append_run(run: DueRun, broker: Broker, now: int, memory: FiredMemory | None, tally: FireTally,
                pruned: set[Partition]) -> bool:
    """Fire a run as `_fire_each` would, with its messages, dedup entries and fire records made
    in C loops, when every one of its timers would be appended: a first try (no retry state), no
    zstd payload, one partition and one producerSub, a queue without maxSize whose payload bound
    they all meet, and no txn found in the partition's dedup index nor twice in the run. Otherwise
    False, and nothing but the queue's creation and the partition's prune (the first steps of the
    general path too) is done.

    The one difference in the state: the run's dedup expiries are one `dedup_expiry` entry for
    all its ids (as a push command's are, partition.expiry_txns), which a snapshot writes as one
    pair per id, as the general path's."""
    keys, count, column = run.keys, len(run.keys), run.column
    partitions, producer_subs = column(F_PARTITION), column(F_PRODUCER_SUB)
    partition_name, producer_sub = partitions[0], producer_subs[0]
    if (column(F_RETRY).count(None) != count or column(F_PAYLOAD_ZSTD).count(False) != count
            or partitions.count(partition_name) != count or producer_subs.count(producer_sub) != count):
        return False
    name = run.queue
    queue = broker.queues.get(name) or broker.queue(name)
    payloads = column(F_PAYLOAD)
    if queue.max_size or max(map(len, payloads)) > queue.max_payload_bytes:
        return False
    txns = column(F_TXN)
    if txns.count(None) == count:  # every txn is its timerKey (stored as None): distinct
        txns = keys
    else:
        txns = [key if txn is None else txn for key, txn in zip(keys, txns)]
        if len(set(txns)) != count:
            return False
    partition_name = DEFAULT_PARTITION if partition_name is None else _intern(partition_name)
    partition = _pruned_partition(queue, partition_name, pruned, now)
    if partition is None:  # created now: it holds only what this fire appends
        partition = queue.partition(partition_name)
        pruned.add(partition)
    elif not partition.dedup.keys().isdisjoint(txns):
        return False
    producer_sub = None if producer_sub is None else _intern(producer_sub)
    first = partition.base + len(partition.log)
    message_ids = column(F_MESSAGE_ID)
    partition.log += zip(txns, message_ids, payloads, repeat(now), repeat(producer_sub), repeat(None),
                         column(F_ENCRYPTED))
    window_ms = queue.dedup_window_ms
    if window_ms > 0:
        expires_at = now + window_ms
        offsets = list(range(first, first + count))  # one int object each, shared by index and record
        partition.dedup.update(zip(txns, zip(offsets, message_ids, repeat(expires_at))))
        partition.dedup_expiry.append((expires_at, txns))
        if memory is not None:
            memory.remember_run(FireRun(now, expires_at, name, partition_name, keys, txns, offsets,
                                        message_ids))
    broker.pushed += count
    tally.appended += count
    tally.lags += repeat(now - run.due_at, count)
    return True


def _pruned_partition(queue: Queue, name: str, pruned: set[Partition], now: int) -> Partition | None:
    """The queue's partition (None when missing), pruned at `now` once per fire."""
    partition = queue.partitions.get(name)
    if partition is not None and partition not in pruned:
        partition.prune(now, queue.retention_ms)
        pruned.add(partition)
    return partition


def _remember(memory: FiredMemory | None, queue: Queue, timer: Timer, offset_or_dlq_id, message_id: str,
              now: int) -> None:
    """Remember where a fired timer went, for the queue's dedup window (fired_memory.py)."""
    if memory is None or queue.dedup_window_ms <= 0:
        return
    _, name, key, partition_name, txn = timer[:5]
    memory.remember((now, now + queue.dedup_window_ms, name, key, partition_name, txn,
                     offset_or_dlq_id, message_id))


def _retry_or_file(timer: Timer, queue: Queue, error: str, table: TimerTable, broker: Broker,
                   policy: FirePolicy, now: int, memory: FiredMemory | None, tally: FireTally) -> None:
    """A failed fire: back the timer off in the table, or file it in the DLQ when this was its
    last attempt. A full queue (`queue_full`) is transient: it waits without spending an attempt."""
    (deliver_at, name, key, partition_name, txn, message_id, payload, payload_zstd,
     encrypted, producer_sub, retry, created_at, _) = timer
    attempts = 0 if retry is None else retry[R_ATTEMPTS]
    if retry is not None:
        deliver_at = retry[R_DELIVER_AT]
    if error == "queue_full":
        due_at = now + policy.transient_backoff_ms
    else:
        attempts += 1
        if attempts >= policy.max_attempts:
            dlq_id = broker.file_row(queue, partition_name, TIMER_DLQ_GROUP, TIMER_DLQ_OFFSET,
                                     txn, message_id, payload, created_at, producer_sub, None,
                                     encrypted, error, attempts, now, key, payload_zstd)
            _remember(memory, queue, timer, dlq_id, message_id, now)
            tally.dlq += 1
            return
        doublings = min(attempts - 1, MAX_BACKOFF_DOUBLINGS)
        due_at = now + min(policy.backoff_min_ms << doublings, policy.backoff_max_ms)
    table.insert((due_at, name, key, partition_name, txn, message_id, payload, payload_zstd,
                  encrypted, producer_sub, (attempts, error, deliver_at), created_at, now))
    tally.failed += 1
