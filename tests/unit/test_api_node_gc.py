"""The node process's garbage-collection policy (queen_raft/node.py)."""

from __future__ import annotations

import gc

import pytest

from queen_raft.node import GC_THRESHOLDS, configure_gc


@pytest.fixture
def restored_gc():
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_configure_gc_freezes_the_startup_heap_and_delays_full_collections(restored_gc):
    startup_object = {"restored": ["state"]}
    gc.unfreeze()
    configure_gc()
    assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_freeze_count() > 0
    assert not any(obj is startup_object for obj in gc.get_objects())  # frozen: no collection walks it


def test_cyclic_garbage_made_after_startup_is_still_collected(restored_gc):
    configure_gc()
    cycle = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


def test_cyclic_garbage_is_collected_without_an_explicit_collection(restored_gc):
    """gen0's threshold is a count of containers not yet freed: garbage cycles add to it, so they
    trigger the young collection that frees them within a few thresholds' worth of objects."""
    import weakref

    class Node:
        pass

    configure_gc()
    first = Node()
    first.me = first
    first_gone = weakref.ref(first)
    del first
    for _ in range(3 * GC_THRESHOLDS[0]):
        node = Node()
        node.me = node
    del node
    assert first_gone() is None
