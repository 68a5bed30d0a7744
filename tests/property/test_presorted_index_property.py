"""A restore builds each sorted index in bulk from values already in order (timer_wire._presorted,
cutting SortedList's sublists directly); the result is the SortedList that adding the values one
by one builds: the same values in the same order, SortedList's own invariants (`_check`), and the
same answers to the positional reads, searches and changes that follow (fire, schedule, cancel).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sortedcontainers import SortedList

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.state import sorted_bulk
from queen_raft.state.timer_wire import _presorted

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

# Small loads, so a few dozen values span many sublists and the edges between them.
LOADS = st.sampled_from([4, 5, 8, 1000])
VALUES = st.lists(st.binary(min_size=0, max_size=6), max_size=120, unique=True)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.binary(max_size=6)),
        st.tuples(st.just("discard"), st.binary(max_size=6)),
        st.tuples(st.just("drop_first"), st.integers(0, 10)),
        st.tuples(st.just("insert_sorted"), st.lists(st.binary(max_size=6), max_size=12, unique=True)),
    ),
    max_size=25,
)


def with_load(load: int, values: list) -> SortedList:
    built = SortedList()
    built._reset(load)
    for value in values:
        built.add(value)
    return built


def bulk(load: int, values: list) -> SortedList:
    previous = SortedList.DEFAULT_LOAD_FACTOR
    SortedList.DEFAULT_LOAD_FACTOR = load  # what `SortedList()` inside _presorted takes as its load
    try:
        return _presorted(sorted(values))
    finally:
        SortedList.DEFAULT_LOAD_FACTOR = previous


def same(bulk_built: SortedList, one_by_one: SortedList) -> None:
    bulk_built._check()
    assert list(bulk_built) == list(one_by_one) and len(bulk_built) == len(one_by_one)
    for position in range(-len(one_by_one), len(one_by_one)):
        assert bulk_built[position] == one_by_one[position]
    for value in list(one_by_one)[::7]:
        assert bulk_built.index(value) == one_by_one.index(value)
        assert bulk_built.bisect_left(value) == one_by_one.bisect_left(value)


@SEQUENCE_SETTINGS
@given(load=LOADS, values=VALUES, steps=STEPS)
def test_a_bulk_built_index_is_the_one_built_value_by_value(load, values, steps):
    bulk_built, one_by_one = bulk(load, values), with_load(load, values)
    same(bulk_built, one_by_one)
    for step, argument in steps:
        for index in (bulk_built, one_by_one):
            if step == "add" and argument not in index:
                index.add(argument)
            elif step == "discard":
                index.discard(argument)
            elif step == "drop_first":
                sorted_bulk.drop_first(index, argument)
            elif step == "insert_sorted":
                sorted_bulk.insert_sorted(index, sorted(v for v in argument if v not in index))
        same(bulk_built, one_by_one)
