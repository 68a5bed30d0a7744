"""A run of fire records kept as its columns (fired_memory.FireRun) must be the records themselves
to everyone who reads the memory: what a trim keeps (by count, in part, and by expiry), what a
lookup finds, what a forget drops, what the snapshot writes. Each case feeds one memory the runs
whole and another the same records one by one, with the same trims, lookups and forgets between."""

from __future__ import annotations

import random

import pytest

from queen_raft.state import limits
from queen_raft.state.fired_memory import FiredMemory, FireRun


def records_of(run: FireRun) -> list[tuple]:
    return [(run.fired_at, run.expires_at, run.queue, key, run.partition, txn, offset, message_id)
            for key, txn, offset, message_id in zip(run.keys, run.txns, run.offsets, run.message_ids)]


@pytest.mark.parametrize("seed", range(80))
def test_runs_kept_as_columns_read_as_their_records(seed, monkeypatch):
    rng = random.Random(seed)
    monkeypatch.setattr(limits, "MAX_REMEMBERED_FIRES", rng.choice([1, 5, 12, 100]))
    whole, one_by_one = FiredMemory(), FiredMemory()
    now, offset = 0, 0
    for _ in range(40):
        now += rng.choice([0, 1, 5, 30])
        for _ in range(rng.randint(1, 3)):
            count = rng.randint(1, 8)
            keys = rng.sample([f"k{i}" for i in range(12)], count)
            run = FireRun(now, now + rng.choice([10, 40]), rng.choice(["q", "r"]), "Default", keys,
                          [f"t-{key}" for key in keys], list(range(offset, offset + count)),
                          tuple(f"m{offset + i}" for i in range(count)))
            offset += count
            if rng.random() < 0.2:  # a timer-by-timer fire between runs
                record = (now, now + 40, "q", rng.choice(keys), "Default", "tx", offset, "m")
                whole.remember(record)
                one_by_one.remember(record)
            whole.remember_run(run)
            for record in records_of(run):
                one_by_one.remember(record)
        whole.trim(now)
        one_by_one.trim(now)
        assert len(whole) == len(one_by_one)
        if rng.random() < 0.3:
            queue, key = rng.choice(["q", "r"]), f"k{rng.randrange(12)}"
            assert whole.find(queue, key, now) == one_by_one.find(queue, key, now)
            if rng.random() < 0.5:
                whole.forget(queue, key)
                one_by_one.forget(queue, key)
    assert whole.to_wire() == one_by_one.to_wire()
    assert list(whole.order) == list(one_by_one.order)
