"""Index and term lookups answered from the journal's per-entry lists (queen_raft/raft/log_index.py):
the same answers as pysyncobj's stock lookups, without reading a command out of the journal."""

from __future__ import annotations

import hashlib
import inspect

import pytest
from pysyncobj.syncobj import SyncObj

from queen_raft.raft.journal import GroupCommitJournal
from queen_raft.raft.leader_append import CoalescingSyncObj

# The stock methods IndexedLogSyncObj replaces, as pinned (pysyncobj 0.3.17): a change there
# must be looked at here first.
STOCK_SOURCE_SHA256 = {
    "_SyncObj__getCurrentLogIndex": "e5af22ca246686bdc5fd2bd9c5e34eac491a571ca9ed3dae493a232cacbacb7a",
    "_SyncObj__getCurrentLogTerm": "1cb8867e6a13d3976c07506c31d71681bc4921334dda8c5958da5d91f2e939ac",
    "_SyncObj__getPrevLogIndexTerm": "6766914806ae2311c345dc6307143c7e379adea0f80e1887c226f8a95ad225af",
    "_SyncObj__getEntries": "e29c4b33293b21018d1124c7e5835748c4c8092f7ce4af9e86f24633ccec7e0e",
}


def stock_digest(name: str) -> str:
    return hashlib.sha256(inspect.getsource(getattr(SyncObj, name)).encode()).hexdigest()


@pytest.mark.parametrize("name", sorted(STOCK_SOURCE_SHA256))
def test_the_stock_lookups_replaced_are_the_pinned_ones(name):
    assert stock_digest(name) == STOCK_SOURCE_SHA256[name]


class CountingJournal(GroupCommitJournal):
    reads = 0

    def entry_at(self, position):
        CountingJournal.reads += 1
        return super().entry_at(position)


@pytest.fixture
def log(tmp_path):
    journal = CountingJournal(str(tmp_path / "j"), None)
    # A compacted log: it starts at index 5; terms change at index 8.
    for idx in range(5, 12):
        journal.add(bytes([0x80]) + b"c" * 3000 + bytes([idx]), idx, 2 if idx < 8 else 3)
    yield journal
    journal._destroy()


def over(log):
    syncobj = object.__new__(CoalescingSyncObj)
    syncobj._SyncObj__raftLog = log
    return syncobj


def both(log, name, *args):
    """(ours, stock) answers of one lookup, and how many entries ours read."""
    syncobj = over(log)
    CountingJournal.reads = 0
    ours = getattr(syncobj, name)(*args)
    ours = list(ours) if isinstance(ours, (list, tuple)) or hasattr(ours, "__len__") else ours
    ours_reads = CountingJournal.reads
    stock = getattr(SyncObj, name)(syncobj, *args)
    stock = list(stock) if isinstance(stock, (list, tuple)) or hasattr(stock, "__len__") else stock
    return ours, stock, ours_reads


def test_last_index_and_term_read_no_entry(log):
    assert both(log, "_SyncObj__getCurrentLogIndex") == (11, 11, 0)
    assert both(log, "_SyncObj__getCurrentLogTerm") == (3, 3, 0)


@pytest.mark.parametrize("next_index", [1, 5, 6, 8, 9, 12, 13, 40])
def test_previous_index_and_term_match_stock_without_reading_entries(log, next_index):
    ours, stock, reads = both(log, "_SyncObj__getPrevLogIndexTerm", next_index)
    assert ours == stock and reads == 0


@pytest.mark.parametrize("from_index, count, max_bytes", [
    (None, None, None), (3, None, None), (5, None, None), (8, 2, None), (11, 1, None), (12, 1, None),
    (6, None, 4000), (6, None, 9000), (5, 3, 1), (9, None, None)])
def test_entries_match_stock(log, from_index, count, max_bytes):
    ours, stock, _ = both(log, "_SyncObj__getEntries", from_index, count, max_bytes)
    assert ours == stock


@pytest.mark.parametrize("from_index, max_bytes, kept", [(6, 4000, 2), (6, 9000, 3), (5, 1, 1), (6, 10**9, 6)])
def test_entries_under_a_byte_budget_are_read_once_each(log, from_index, max_bytes, kept):
    """The leader asks for the tail under a byte budget for every AppendEntries it sends: each
    entry it keeps is read (copied and checked) once, not once to size it and again to return it."""
    ours, stock, reads = both(log, "_SyncObj__getEntries", from_index, None, max_bytes)
    assert ours == stock and len(ours) == kept
    assert reads == kept


def test_a_stock_log_takes_the_stock_path():
    stock_log = [(b"a", 3, 1), (b"b", 4, 2)]  # pysyncobj's in-memory journal is a list of tuples
    syncobj = over(stock_log)
    assert syncobj._SyncObj__getCurrentLogIndex() == 4
    assert syncobj._SyncObj__getCurrentLogTerm() == 2
    assert syncobj._SyncObj__getPrevLogIndexTerm(4) == (3, 1)
    assert list(syncobj._SyncObj__getEntries(4)) == [(b"b", 4, 2)]
