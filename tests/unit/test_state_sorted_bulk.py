"""The bulk removals of the fire path leave a SortedList exactly as one-by-one removals would:
same values, same order, and sortedcontainers' own invariant check (`_check`) passes, so every
later SortedList operation (add, remove, bisect, positional access) keeps working."""

import random

import pytest
from sortedcontainers import SortedList

from queen_raft.state.sorted_bulk import drop_first, insert_sorted, remove_sorted

# Small loads make sublists split and merge after a handful of values; the default load (1000)
# is what the state runs with.
LOADS = [4, 5, 8, 1000]


def filled(load: int, values: list) -> SortedList:
    entries = SortedList()
    entries._reset(load)
    entries.update(values)
    return entries


def check_after(entries: SortedList, expected: list) -> None:
    entries._check()
    assert list(entries) == expected
    assert len(entries) == len(expected)
    # Positional access rebuilds the index that the bulk removal dropped.
    for index in range(0, len(expected), max(1, len(expected) // 7)):
        assert entries[index] == expected[index]
        assert entries.index(expected[index]) == index
    # And the list keeps taking values.
    entries.add(-1)
    entries.add(10**9)
    entries._check()
    assert entries[0] == -1 and entries[-1] == 10**9


@pytest.mark.parametrize("load", LOADS)
def test_drop_first_equals_deleting_a_prefix(load):
    rng = random.Random(load)
    for _ in range(200):
        values = sorted(rng.sample(range(100_000), rng.randint(0, 3000 if load == 1000 else 200)))
        entries = filled(load, values)
        if rng.random() < 0.5 and values:
            # A positional read first, so the index exists and must be dropped.
            assert entries[len(values) // 2] == values[len(values) // 2]
        count = rng.choice([0, 1, 2, load // 2, load, 2 * load + 1, len(values) // 2,
                            len(values), len(values) + 3, rng.randint(0, len(values) + 1)])
        drop_first(entries, count)
        check_after(entries, values[count:])


@pytest.mark.parametrize("load", LOADS)
def test_remove_sorted_equals_removing_each(load):
    rng = random.Random(load * 31)
    for _ in range(200):
        values = sorted(rng.sample(range(100_000), rng.randint(1, 3000 if load == 1000 else 200)))
        entries = filled(load, values)
        if rng.random() < 0.5:
            assert entries[len(values) // 3] == values[len(values) // 3]
        shape = rng.choice(["scattered", "run", "all", "one", "ends", "strided"])
        if shape == "strided":  # one value in `stride`: dense below FILTER_SPAN_PER_VALUE, sparse above
            stride = rng.randint(2, 20)
            gone = values[rng.randrange(stride)::stride] or [values[0]]
        elif shape == "scattered":
            gone = sorted(rng.sample(values, rng.randint(1, len(values))))
        elif shape == "run":
            start = rng.randrange(len(values))
            gone = values[start:start + rng.randint(1, 3 * load)]
        elif shape == "all":
            gone = list(values)
        elif shape == "one":
            gone = [rng.choice(values)]
        else:
            gone = sorted({values[0], values[-1]})
        remove_sorted(entries, gone)
        dropped = set(gone)
        check_after(entries, [value for value in values if value not in dropped])


@pytest.mark.parametrize("load", LOADS)
def test_insert_sorted_equals_adding_each(load):
    rng = random.Random(load * 17)
    for _ in range(200):
        universe = rng.sample(range(100_000), rng.randint(1, 6000 if load == 1000 else 400))
        split = rng.randint(0, len(universe))
        present, new = sorted(universe[:split]), universe[split:]
        shape = rng.choice(["scattered", "run", "above", "below", "one"])
        if shape == "run" and new:
            low = rng.choice(new)
            new = [value for value in new if low <= value < low + 2000]
        elif shape == "above":
            top = max(present, default=-1)
            new = [value for value in new if value > top]
        elif shape == "below":
            bottom = min(present, default=100_000)
            new = [value for value in new if value < bottom]
        elif shape == "one":
            new = new[:1]
        entries = filled(load, present)
        if rng.random() < 0.5 and present:
            assert entries[len(present) // 2] == present[len(present) // 2]
        insert_sorted(entries, sorted(new))
        check_after(entries, sorted(present + new))


def test_remove_sorted_of_nothing_changes_nothing():
    entries = filled(4, list(range(20)))
    remove_sorted(entries, [])
    check_after(entries, list(range(20)))


def test_works_on_the_state_s_tuples():
    """The due index holds tuples ordered by (dueAt, queue, timerKey)."""
    values = sorted((due, queue, f"k{n}") for n, (due, queue) in
                    enumerate((d % 7, q) for d in range(300) for q in ("a", "b")))
    entries = filled(8, values)
    drop_first(entries, 37)
    remove_sorted(entries, values[40:300:3])
    expected = [v for i, v in enumerate(values) if i >= 37 and not (40 <= i < 300 and (i - 40) % 3 == 0)]
    entries._check()
    assert list(entries) == expected


GAP = 5000  # between neighbouring present values: room for a run of several sublists


@pytest.mark.parametrize("load", LOADS)
def test_insert_sorted_of_a_run_in_one_gap_equals_adding_each(load):
    """The one-slice path: values that all fall between two neighbours present (or before the
    first, or after the last), of every length up to several sublists' worth; and the values
    that share a sublist with a present value between them, which must not take it."""
    rng = random.Random(load * 7)
    for _ in range(200):
        present = sorted(rng.sample(range(GAP * 2, GAP * 4002, GAP), rng.randint(1, 3000 if load == 1000 else 300)))
        gap_after = rng.choice([0] + present)  # 0: before the first present value
        run = sorted(rng.sample(range(gap_after + 1, gap_after + GAP), rng.choice([1, 2, load, 3 * load + 1, GAP - 1])))
        if rng.random() < 0.3:
            # One value in the next gap: the run spans a present value (the slot between is often taken).
            run.append(gap_after + GAP + 1 + rng.randrange(GAP - 2))
        entries = filled(load, present)
        if rng.random() < 0.5:
            assert entries[len(present) // 2] == present[len(present) // 2]
        insert_sorted(entries, run)
        check_after(entries, sorted(present + run))


def test_insert_sorted_of_a_run_takes_the_slice_path():
    """A run into a gap inside a sublist is inserted whole, not value by value (`insort` is not
    called), and one that a present value splits is not."""
    import queen_raft.state.sorted_bulk as sorted_bulk
    calls = []
    real_insort = sorted_bulk.insort
    sorted_bulk.insort = lambda sublist, value: (calls.append(value), real_insort(sublist, value))
    try:
        entries = filled(1000, list(range(0, 3000, 10)))
        insert_sorted(entries, [501, 502, 503, 504])
        assert calls == []
        check_after(entries, sorted(list(range(0, 3000, 10)) + [501, 502, 503, 504]))
        entries = filled(1000, list(range(0, 3000, 10)))
        insert_sorted(entries, [501, 502, 511])
        assert calls == [501, 502, 511]
        check_after(entries, sorted(list(range(0, 3000, 10)) + [501, 502, 511]))
    finally:
        sorted_bulk.insort = real_insort


class CountingList(list):
    """A sublist that counts how often its length is asked: a scan of every sublist asks each."""

    asked = 0

    def __len__(self) -> int:
        CountingList.asked += 1
        return super().__len__()


def counting(entries: SortedList) -> SortedList:
    entries._lists[:] = [CountingList(sublist) for sublist in entries._lists]
    CountingList.asked = 0
    return entries


@pytest.mark.parametrize("change", ["drop_first", "remove_sorted", "insert_sorted"])
def test_a_bulk_change_looks_only_at_the_sublists_it_changes(change):
    """A fire or a schedule must cost the same with ten thousand sublists as with ten: the bulk
    changes check the lengths of the sublists they touched, never of all of them."""
    values = list(range(0, 80_000, 2))
    entries = counting(filled(8, values))
    assert len(entries._lists) >= 5_000
    if change == "drop_first":
        drop_first(entries, 5)
        expected = values[5:]
    elif change == "remove_sorted":
        remove_sorted(entries, [40_000, 40_002, 40_004, 40_006, 40_008])
        expected = [v for v in values if not 40_000 <= v <= 40_008]
    else:
        # Into the middle, and a run past the end that cuts the last sublist into chunks.
        added = list(range(40_001, 40_041, 2)) + list(range(80_001, 80_200))
        insert_sorted(entries, added)
        expected = sorted(values + added)
    assert CountingList.asked < 50
    check_after(entries, expected)
