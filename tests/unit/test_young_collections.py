"""The node's time-paced young collections (queen_raft/young_collections.py)."""

from __future__ import annotations

import gc

import pytest

from queen_raft.young_collections import PERIOD_S, YoungCollections, collect_young


@pytest.fixture
def quiet_collector():
    """Automatic collections off for the test, so that only the calls under test move the counts."""
    was_enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def test_nothing_runs_while_few_containers_wait(quiet_collector):
    kept = [[i] for i in range(5)]
    assert gc.get_count()[0] < 1000
    assert collect_young(min_young=1000) is None
    assert gc.get_count()[0] >= len(kept)  # nothing was collected


def test_young_sublists_leave_the_young_generation(quiet_collector):
    """The case the pacer exists for: big long-lived lists, few enough not to reach threshold0."""
    sublists = [list(range(2000)) for _ in range(60)]
    young_ids = {id(obj) for obj in gc.get_objects(0)}
    assert all(id(sublist) in young_ids for sublist in sublists)
    assert collect_young(min_young=50) == 0
    young_ids = {id(obj) for obj in gc.get_objects(0)}
    assert not any(id(sublist) in young_ids for sublist in sublists)
    assert all(len(sublist) == 2000 for sublist in sublists)  # kept alive, only moved on


def test_gen1_is_collected_after_threshold1_young_collections(quiet_collector):
    threshold1 = gc.get_threshold()[1]
    for _ in range(threshold1):
        gc.collect(0)
    in_gen1 = [[i] for i in range(10)]
    gc.collect(0)  # into gen1; this is one young collection more than threshold1
    assert any(obj is in_gen1[0] for obj in gc.get_objects(1))
    assert collect_young(min_young=10**9) == 1
    assert not any(obj is in_gen1[0] for obj in gc.get_objects(1))
    assert gc.get_count()[1] == 0


def test_cyclic_garbage_is_freed_by_a_paced_collection(quiet_collector):
    freed = []

    class Node:
        def __del__(self):
            freed.append(True)

    for _ in range(60):
        a, b = Node(), Node()
        a.other, b.other = b, a
    del a, b
    assert collect_young(min_young=50) == 0
    assert len(freed) == 120


class FakeLoop:
    def __init__(self) -> None:
        self.scheduled: list[tuple[float, object]] = []

    def call_later(self, delay, callback):
        handle = FakeHandle(callback)
        self.scheduled.append((delay, handle))
        return handle


class FakeHandle:
    def __init__(self, callback) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_the_pacer_steps_every_period_until_stopped(quiet_collector):
    loop = FakeLoop()
    pacer = YoungCollections(min_young=50)
    pacer.start(loop)
    assert [delay for delay, _ in loop.scheduled] == [PERIOD_S]
    kept = [list(range(100)) for _ in range(60)]
    loop.scheduled[-1][1].callback()
    assert pacer.collections == [1, 0]
    assert len(loop.scheduled) == 2  # it scheduled its next step
    loop.scheduled[-1][1].callback()  # nothing young waits now
    assert pacer.collections == [1, 0]
    pacer.stop()
    assert loop.scheduled[-1][1].cancelled
    assert len(kept) == 60
