"""The Raft layer's parts alone, the journal: group commit and its fsynced meta, compaction
(refused past the end, atomic in the journal format, crash-safe), the factory, the byte count, and a
journal reconciled with (or refused against) the snapshot beside it."""

from __future__ import annotations

import os

import pytest
from pysyncobj.pickle import loads as pysyncobj_loads

from queen_raft.raft.journal import (
    CompactionGuardedJournal,
    DurableMetaStorer,
    GroupCommitJournal,
)
from queen_raft.raft.journal_factory import create_journal, register_journal, unregister_journal


# -- journal -------------------------------------------------------------------------------------------


def test_group_commit_journal_marks_dirty_and_flushes_once(tmp_path):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    assert not journal.flush_if_dirty()
    journal.add(b"\x00a", 1, 1)
    journal.add(b"\x00b", 2, 1)
    assert journal.dirty
    assert journal.flush_if_dirty() and journal.flushes == 1
    assert not journal.flush_if_dirty()
    journal.deleteEntriesFrom(1)
    assert journal.dirty
    journal.flush_if_dirty()
    journal._destroy()
    reopened = CompactionGuardedJournal(str(tmp_path / "j"))
    assert [e[1] for e in reopened] == [1]


def test_term_and_vote_are_written_through_the_fsyncing_meta_storer(tmp_path):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    assert isinstance(journal._FileJournal__metaStorer, DurableMetaStorer)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    with open(str(tmp_path / "j.meta"), "rb") as f:
        meta = pysyncobj_loads(f.read())
    assert meta["currentTerm"] == 7 and meta["votedForNodeId"] == "127.0.0.1:1"
    assert not os.path.exists(str(tmp_path / "j.meta.tmp"))


def test_compaction_past_the_end_of_the_log_is_refused(tmp_path):
    journal = CompactionGuardedJournal(str(tmp_path / "j"))
    for idx in (1, 2, 3):
        journal.add(b"\x00", idx, 1)
    journal.deleteEntriesTo(3)  # would empty the log: every tick would raise IndexError
    assert len(journal) == 3 and journal.compactions_refused == 1
    journal.deleteEntriesTo(2)
    assert [e[1] for e in journal] == [3]


def test_clearing_the_journal_in_group_mode_makes_the_snapshot_durable_first(tmp_path, monkeypatch):
    from queen_raft.raft.snapshot_file import encode_snapshot

    dump = tmp_path / "snap"
    dump.write_bytes(encode_snapshot(([{}, b"state"], (b"\x00", 2, 1), (b"\x00", 1, 1), set())))
    synced = []
    monkeypatch.setattr("queen_raft.raft.journal.fsync_path", synced.append)
    journal = GroupCommitJournal(str(tmp_path / "j"), str(dump))
    journal.clear()  # as when a snapshot from the leader is loaded
    assert str(dump) in synced
    for idx in (1, 2, 3):
        journal.add(b"\x00", idx, 1)
    synced.clear()
    journal.deleteEntriesTo(2)
    assert str(dump) in synced and str(tmp_path) in synced  # the file and its directory
    assert [e[1] for e in journal] == [3]


def test_journal_factory_picks_the_registered_kind(tmp_path):
    group_path, off_path = str(tmp_path / "g"), str(tmp_path / "o")
    register_journal(group_path, "group", None)
    register_journal(off_path, "off", None)
    try:
        assert type(create_journal(group_path)) is GroupCommitJournal
        assert type(create_journal(off_path)) is CompactionGuardedJournal
    finally:
        unregister_journal(group_path)
        unregister_journal(off_path)


def test_journal_counts_its_bytes_through_every_change(tmp_path):
    journal = CompactionGuardedJournal(str(tmp_path / "j"))
    for idx, size in ((1, 10), (2, 20), (3, 30)):
        journal.add(b"\x00" * size, idx, 1)
    assert journal.size_bytes == 60
    journal.deleteEntriesFrom(2)
    assert journal.size_bytes == 30
    journal.deleteEntriesTo(1)
    assert journal.size_bytes == 20
    journal._destroy()
    assert CompactionGuardedJournal(str(tmp_path / "j")).size_bytes == 20  # recounted on reopen


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_compaction_rewrites_the_journal_atomically_in_the_journal_format(tmp_path, kind):
    path = str(tmp_path / "j")
    journal = kind(path, None)
    entries = [(b"\x00" + bytes([i]) * (i * 100), i, 1 + i // 4) for i in range(1, 11)]
    for entry in entries:
        journal.add(*entry)
    with open(path + ".compacting", "wb") as stale:
        stale.write(b"left by a crash")
    journal.deleteEntriesTo(6)
    assert [tuple(e) for e in journal] == entries[6:]
    journal.add(b"\x00new", 11, 4)  # appends continue after the rewritten records
    journal._destroy()
    assert not os.path.exists(path + ".compacting")
    reopened = CompactionGuardedJournal(path)  # a fresh load agrees
    assert [tuple(e) for e in reopened] == entries[6:] + [(b"\x00new", 11, 4)]


def test_a_crash_during_compaction_leaves_the_old_journal_whole(tmp_path, monkeypatch):
    path = str(tmp_path / "j")
    journal = CompactionGuardedJournal(path)
    entries = [(b"\x00" + bytes([i]) * 50, i, 1) for i in range(1, 8)]
    for entry in entries:
        journal.add(*entry)

    def crash(*args):
        raise KeyboardInterrupt("killed between writing the new journal and renaming it")

    monkeypatch.setattr("queen_raft.raft.journal.os.replace", crash)
    with pytest.raises(KeyboardInterrupt):
        journal.deleteEntriesTo(4)
    assert [tuple(e) for e in CompactionGuardedJournal(path)] == entries  # the journal on disk is untouched


def write_pysyncobj_dump(path: str, last: tuple, prev: tuple) -> None:
    """A snapshot file as pysyncobj's forked serializer writes it: gzip(pickle((data, last, prev, cluster)))."""
    import gzip

    import pysyncobj.pickle

    with gzip.open(path, "wb") as dump:
        pysyncobj.pickle.dump(([{}, b"state"], last, prev, set()), dump)


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_a_journal_behind_its_snapshot_keeps_the_tail_after_the_snapshot(tmp_path, kind):
    """Killed between the snapshot's rename and the journal's compaction: stock pysyncobj would
    clear the journal down to the snapshot's two entries and lose entries 7..10 on this node."""
    path, dump = str(tmp_path / "j"), str(tmp_path / "snap")
    entries = [(b"\x00" + bytes([i]), i, 1) for i in range(1, 11)]
    journal = kind(path, None)
    for entry in entries:
        journal.add(*entry)
    journal._destroy()
    write_pysyncobj_dump(dump, last=entries[5], prev=entries[4])

    reopened = kind(path, dump)
    assert reopened.reconciled_with_snapshot
    assert [tuple(e) for e in reopened] == entries[4:]  # [prev, last, 7, 8, 9, 10]: what pysyncobj accepts
    reopened._destroy()
    assert [tuple(e) for e in CompactionGuardedJournal(path)] == entries[4:]


def test_a_journal_whose_committed_entry_conflicts_with_its_snapshot_refuses_to_open(tmp_path):
    """Stock pysyncobj would clear the journal down to the snapshot's entries (losing committed 5);
    the node refuses to start instead (snapshot_reconcile.py), and the journal is left untouched."""
    from queen_raft.raft.snapshot_file import DataDirRefused

    path, dump = str(tmp_path / "j"), str(tmp_path / "snap")
    journal = CompactionGuardedJournal(path)
    for i in range(1, 6):
        journal.add(b"\x00", i, 1)
    journal.setRaftCommitIndex(5)
    journal.onOneSecondTimer()  # stores the meta
    journal._destroy()
    write_pysyncobj_dump(dump, last=(b"\x00", 4, 2), prev=(b"\x00", 3, 2))  # same index, other term
    with pytest.raises(DataDirRefused, match="conflicts with the committed entry at that index"):
        CompactionGuardedJournal(path, dump)
    assert len(CompactionGuardedJournal(path)) == 5
