"""TimerTable.take_due takes exactly what a walk of the due index, one entry at a time, takes: every
replica must fire the same timers in an entry whichever code applies it (old and new members of a
group in a rolling upgrade), so the bulk path may change how, never what. The byte bound matters
most: it is checked on payloads, and the bulk path decodes at once only the entries whose lengths
alone keep it within the bound."""

from __future__ import annotations

import random
from itertools import islice

import pytest

from queen_raft.state.timer_entries import due_bytes, timer_of
from queen_raft.state.timers import T_PAYLOAD, TimerTable


def walk_due(table: TimerTable, now: int, max_count: int, max_bytes: int) -> list[tuple]:
    """The reference: decode entry by entry, stop at the first not due or past a bound."""
    taken, total = [], 0
    for entry in islice(table.due, max_count):
        if entry >= due_bytes(now + 1):
            break
        timer = timer_of(entry)
        if taken and total + len(timer[T_PAYLOAD]) > max_bytes:
            break
        total += len(timer[T_PAYLOAD])
        taken.append(timer)
    return taken


def filled(seed: int, count: int, load: int) -> TimerTable:
    rng = random.Random(seed * 7919)
    table = TimerTable()
    table.due._reset(load)  # small sublists: the due prefix crosses several
    for i in range(count):
        size = rng.choice([0, 1, 10, 100, 1000, 5000])
        table.upsert(rng.choice(["q", "r"]), f"k{i}", "Default", rng.randint(0, 40), f"t{i}",
                     f"m{i}", bytes(size), False, False, None, 0)
    table.commit_staged()
    return table


@pytest.mark.parametrize("seed", range(40))
def test_take_due_takes_what_the_entry_by_entry_walk_takes(seed):
    rng = random.Random(seed)
    count = rng.randint(0, 300)
    table = filled(seed, count, rng.choice([4, 16, 1000]))
    reference = filled(seed, count, 4)
    while table.due:
        now = rng.randint(-5, 45)
        max_count = rng.choice([1, 2, 7, 50, 4096])
        max_bytes = rng.choice([0, 1, 500, 6000, 20_000, 4 * 1024 * 1024])
        expected = walk_due(reference, now, max_count, max_bytes)
        assert table.take_due(now, max_count, max_bytes) == expected
        reference.take_due(now, max_count, max_bytes)
        assert list(table.due) == list(reference.due)
        assert table.count == reference.count == len(table.due)
        table.due._check()
