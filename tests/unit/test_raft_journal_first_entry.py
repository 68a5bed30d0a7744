"""The log's first entry is read out of the journal once, and a memo of it is never served after the
first entry changed: compaction, truncation, a snapshot install, a reload, or a first entry that is
damaged on disk before it was ever read."""

from __future__ import annotations

import pytest

from queen_raft.raft import damaged
from queen_raft.raft.damaged import DamagedDataError
from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_format import RECORD_HEAD

ENTRIES = [(bytes([i]) * (1000 + i), i, 1 + i // 4) for i in range(1, 11)]


def journal_with(path, entries=ENTRIES, kind=GroupCommitJournal):
    journal = kind(str(path), None)
    for entry in entries:
        journal.add(*entry)
    return journal


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_the_first_entry_is_read_once_however_often_it_is_asked_for(tmp_path, kind):
    journal = journal_with(tmp_path / "raft.journal", kind=kind)
    reads = []
    entry_at = journal.entry_at
    journal.entry_at = lambda position: reads.append(position) or entry_at(position)
    for _ in range(5):
        assert journal[0] == ENTRIES[0] and journal[0][1] == 1  # what pysyncobj's sender reads
        assert journal[-len(ENTRIES)] == ENTRIES[0]  # the same position, counted from the end
    assert reads == [0] and journal.first_entry_reads == 1
    assert journal[3] == ENTRIES[3] and journal[3] == ENTRIES[3]
    assert reads == [0, 3, 3]  # other positions are read (and checked) at every look
    journal._destroy()


def test_after_a_compaction_the_new_first_entry_is_served(tmp_path):
    journal = journal_with(tmp_path / "raft.journal")
    assert journal[0] == ENTRIES[0]
    journal.deleteEntriesTo(4)  # the compaction keeps the snapshot's last entry first
    assert journal[0] == ENTRIES[4] and journal[0][1] == 5
    journal.deleteEntriesTo(2)
    assert journal[0] == ENTRIES[6] and list(journal[0:len(journal)]) == ENTRIES[6:]
    journal._destroy()


def test_a_truncation_to_nothing_and_a_new_first_entry_at_the_same_offset_is_served(tmp_path):
    journal = journal_with(tmp_path / "raft.journal")
    assert journal[0] == ENTRIES[0]
    journal.deleteEntriesFrom(0)  # a follower's log replaced from its first entry on
    replacement = (b"another command", 1, 2)  # the same index in a later term, at the same offset
    journal.add(*replacement)
    assert journal[0] == replacement
    journal._destroy()


def test_a_snapshot_install_clears_the_log_and_its_last_entry_is_served(tmp_path):
    journal = journal_with(tmp_path / "raft.journal")
    assert journal[0] == ENTRIES[0]
    journal.clear()
    snapshot_last = (b"the snapshot's last entry", 40, 7)
    journal.add(*snapshot_last)
    assert journal[0] == snapshot_last and len(journal) == 1
    journal._destroy()


def test_a_reloaded_journal_reads_its_first_entry_from_the_file(tmp_path):
    path = tmp_path / "raft.journal"
    journal = journal_with(path)
    assert journal[0] == ENTRIES[0]
    journal.deleteEntriesTo(3)
    journal.flush_if_dirty()
    journal._destroy()
    reopened = GroupCommitJournal(str(path), None)
    assert reopened.first_entry_reads == 0 and reopened[0] == ENTRIES[3]
    reopened._destroy()


def test_a_first_entry_damaged_before_its_first_read_is_refused_then(tmp_path):
    journal = journal_with(tmp_path / "raft.journal")
    reported = []
    damaged.on_runtime_damage(reported.append)
    try:
        journal._mmap()[journal._offsets[0] + RECORD_HEAD.size + 1] ^= 0x01
        with pytest.raises(DamagedDataError):
            journal[0]
        with pytest.raises(DamagedDataError):
            journal[0]  # a refused read leaves no memo behind
    finally:
        damaged.remove_runtime_damage_listener(reported.append)
    assert len(reported) == 2
    journal._destroy()
