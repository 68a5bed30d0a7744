"""A full disk is an error the journal survives, never SIGBUS: records it cannot write wait in memory,
unflushed and so never acknowledged, the leader steps down, and all goes on when space returns.

The disk is made full by making posix_fallocate answer ENOSPC (the integration test
test_node_full_disk.py does it with a real tmpfs)."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from pysyncobj.journal import LAST_RECORD_OFFSET_OFFSET
from pysyncobj.transport import TCPTransport

from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_storage import PreallocatedFile
from queen_raft.raft.transport import GroupTransport

BIG = b"\x00" + b"b" * 4000  # a few of these outgrow the journal's first reservation


class Disk:
    """posix_fallocate that fails with ENOSPC while `full`."""

    def __init__(self, monkeypatch) -> None:
        self.full = False
        real = os.posix_fallocate

        def fallocate(fd, offset, length):
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd, offset, length)

        monkeypatch.setattr(os, "posix_fallocate", fallocate)


def end_offset_on_disk(path: str) -> int:
    with open(path, "rb") as f:
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        return struct.unpack("<I", f.read(4))[0]


def test_growing_the_file_on_a_full_disk_raises_enospc_and_writes_nothing(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    path = str(tmp_path / "f")
    preallocated = PreallocatedFile(path, b"h" * 40)
    preallocated.reserve_all(backed_through=40)
    disk.full = True
    with pytest.raises(OSError) as caught:
        preallocated.write(4000, b"x" * 100)
    assert caught.value.errno == errno.ENOSPC
    assert os.path.getsize(path) == 1024 and preallocated.capacity == 1024
    preallocated.write(900, b"y" * 100)  # inside what was reserved: fine
    disk.full = False
    preallocated.write(4000, b"x" * 100)
    assert preallocated.read(4000, 100) == b"x" * 100
    preallocated._destroy()


def test_records_wait_in_memory_unacknowledged_and_go_to_disk_when_space_returns(tmp_path, monkeypatch, caplog):
    disk = Disk(monkeypatch)
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    journal.add(b"\x00small", 1, 1)
    assert journal.flush_if_dirty()
    disk.full = True
    entries = [(BIG, idx, 1) for idx in range(2, 8)]
    with caplog.at_level("ERROR"):
        for entry in entries:
            journal.add(*entry)
    assert journal.disk_full
    assert caplog.text.count("cannot write") == 1  # logged once, not per append
    assert list(journal)[1:] == entries  # readable: the node goes on applying and serving reads
    assert not journal.flush_if_dirty() and journal.dirty  # nothing flushed, so acknowledgements stay held
    assert journal.flushes == 1
    spilled_from = journal._spill_from
    assert end_offset_on_disk(path) <= spilled_from  # the header never covers what is not in the file
    disk.full = False
    assert journal.flush_if_dirty() and not journal.dirty and not journal.disk_full
    assert "writable again" in caplog.text
    journal._destroy()
    assert list(CompactionGuardedJournal(path, None)) == [(b"\x00small", 1, 1)] + entries


def test_a_crash_while_records_wait_in_memory_loses_only_those_records(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    journal.add(b"\x00kept", 1, 1)
    journal.flush_if_dirty()
    disk.full = True
    for idx in range(2, 6):
        journal.add(BIG, idx, 1)
    assert journal.disk_full
    journal._destroy()  # as a kill: the spill was never written
    disk.full = False
    assert list(GroupCommitJournal(path, None)) == [(b"\x00kept", 1, 1)]


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_megabytes_waiting_in_memory_leave_the_mapping_alone(tmp_path, monkeypatch, kind):
    # Pages behind the written end leave the resident set; the waiting records are not in the file.
    disk = Disk(monkeypatch)
    journal = kind(str(tmp_path / "raft.journal"), None)
    journal.add(b"\x00a", 1, 1)
    disk.full = True
    big = b"\x00" + b"m" * (256 * 1024)
    for idx in range(2, 12):
        journal.add(big, idx, 1)
    assert journal.disk_full and journal[-1] == (big, 11, 1)
    disk.full = False
    journal.onOneSecondTimer()  # the once-a-second retry (off mode has no flush)
    assert not journal.disk_full and journal[5] == (big, 6, 1)
    journal._destroy()


def test_truncating_inside_and_below_the_waiting_records(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    journal = CompactionGuardedJournal(str(tmp_path / "raft.journal"), None)
    journal.add(b"\x00a", 1, 1)
    disk.full = True
    for idx in range(2, 7):
        journal.add(BIG, idx, 1)
    journal.deleteEntriesFrom(4)  # a follower's conflict inside the spill
    assert [e[1] for e in journal] == [1, 2, 3, 4] and journal.disk_full
    journal.add(b"\x00c", 5, 2)
    assert journal[-1] == (b"\x00c", 5, 2)
    journal.deleteEntriesFrom(1)  # below where the spill starts: nothing waits any more
    assert [e[1] for e in journal] == [1] and not journal.disk_full
    journal._destroy()


def test_a_compaction_that_does_not_fit_keeps_the_journal(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    for idx in range(1, 6):
        journal.add(BIG, idx, 1)
    journal.flush_if_dirty()
    disk.full = True
    assert journal.deleteEntriesTo(3) is False
    assert [e[1] for e in journal] == [1, 2, 3, 4, 5] and journal.compactions_refused == 1
    assert not os.path.exists(path + ".compacting")
    journal._destroy()


def test_a_failed_fdatasync_stops_acknowledgements_for_good(tmp_path, monkeypatch):
    journal = GroupCommitJournal(str(tmp_path / "raft.journal"), None)
    journal.add(b"\x00x", 1, 1)

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    assert not journal.flush_if_dirty() and journal.dirty and journal.disk_full
    monkeypatch.undo()  # the disk answers again: a later success proves nothing about those pages
    assert not journal.flush_if_dirty() and journal.dirty and journal.disk_full
    journal._destroy()


class FakeLeader:
    """What GroupTransport._stand_aside touches of a SyncObj."""

    class conf:
        raftMaxTimeout = 2.0

    def __init__(self) -> None:
        self.state = 2  # leader
        self._SyncObj__raftLeader = "self"
        self._SyncObj__raftElectionDeadline = 0.0

    def _isLeader(self) -> bool:
        return self.state == 2

    def _SyncObj__setState(self, state: int) -> None:
        self.state = state


def test_a_leader_whose_journal_cannot_write_steps_down_and_stands_for_no_election(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    journal = GroupCommitJournal(str(tmp_path / "raft.journal"), None)
    transport = object.__new__(GroupTransport)
    transport.group_commit_journal = transport.journal = journal
    transport.compaction_requests = 0
    transport._held, transport._nodes, transport._connections = {}, {"peer"}, {}
    transport._syncObj = FakeLeader()
    monkeypatch.setattr(TCPTransport, "_onTick", lambda self: None)
    transport._onTick()
    assert transport._syncObj._isLeader()  # a writable journal: nothing changes
    disk.full = True
    for idx in range(1, 4):
        journal.add(BIG, idx, 1)
    transport._onTick()
    leader = transport._syncObj
    assert not leader._isLeader() and leader._SyncObj__raftLeader is None
    assert leader._SyncObj__raftElectionDeadline > 0  # pushed ahead on every tick while full
    disk.full = False
    transport._onTick()  # the flush writes the records out: the node may stand again later
    assert not journal.disk_full and not journal.dirty
    journal._destroy()


def test_a_new_term_is_stored_on_a_full_disk_in_the_space_kept_for_it(tmp_path, monkeypatch):
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    journal.setCurrentTerm(3, None)
    reserve = path + ".meta.reserve"
    assert os.path.getsize(reserve) == 64 * 1024
    storer = journal._FileJournal__metaStorer
    real_write = type(storer)._write
    failures = []

    def full_once(self, meta):
        if os.path.exists(reserve):  # the disk is full until the reserve is given back
            failures.append(meta["currentTerm"])
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, meta)

    monkeypatch.setattr(type(storer), "_write", full_once)
    journal.setCurrentTerm(4, None)  # a new leader's term: must be stored to follow it
    assert failures == [4] and not os.path.exists(reserve)
    def always_full(self, meta):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(storer), "_write", always_full)
    with pytest.raises(OSError):  # no reserve left: the store fails, pysyncobj sends no vote
        journal.setCurrentTerm(5, "127.0.0.1:1")
    monkeypatch.undo()
    journal.setCurrentTerm(6, None)  # space again: stored, and the reserve made again
    assert os.path.getsize(reserve) == 64 * 1024
    journal._destroy()
    reopened = GroupCommitJournal(path, None)
    assert reopened.getCurrentTerm() == 6
    reopened._destroy()


def test_acknowledgements_held_on_a_full_disk_keep_only_the_newest_of_a_run(tmp_path, monkeypatch):
    disk = Disk(monkeypatch)
    journal = GroupCommitJournal(str(tmp_path / "raft.journal"), None)
    transport = object.__new__(GroupTransport)
    transport.group_commit_journal = transport.journal = journal
    transport._held, transport._connections = {}, {}
    journal.add(b"\x00a", 1, 1)
    first = {"type": "next_node_idx", "next_node_idx": 2, "success": True}
    other = {"type": "apply_command", "command": b"x"}
    transport.send("leader", first)
    transport.send("leader", other)
    assert transport.held_count() == 2  # a writable disk: every message held, in order
    disk.full = True
    for idx in range(2, 6):
        journal.add(BIG, idx, 1)
    acks = [{"type": "next_node_idx", "next_node_idx": idx + 1, "success": True} for idx in range(2, 6)]
    for ack in acks:
        transport.send("leader", ack)
    assert journal.disk_full and list(transport._held["leader"]) == [first, other, acks[-1]]
    journal._destroy()


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES])
def test_a_data_dir_that_takes_no_writes_is_a_full_disk_not_an_error_out_of_every_tick(tmp_path, monkeypatch, code):
    # A filesystem remounted read-only after errors (EROFS), or a dir whose permissions were taken
    # away (EACCES): records wait in memory, the node takes no writes, and it goes on once writable.
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    journal.add(b"\x00a", 1, 1)
    assert journal.flush_if_dirty()
    writable = [False]
    real_fallocate = os.posix_fallocate
    storer = journal._FileJournal__metaStorer
    real_write = type(storer)._write

    def fallocate(fd, offset, length):
        if not writable[0]:
            raise OSError(code, os.strerror(code))
        return real_fallocate(fd, offset, length)

    def write_meta(self, meta):
        if not writable[0]:
            raise OSError(code, os.strerror(code))
        real_write(self, meta)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    monkeypatch.setattr(type(storer), "_write", write_meta)
    for idx in range(2, 6):
        journal.add(BIG, idx, 1)
    assert journal.disk_full and not journal.flush_if_dirty()
    journal.setRaftCommitIndex(3)
    journal.onOneSecondTimer()  # the commit index cannot be saved: retried, not raised
    writable[0] = True
    journal.onOneSecondTimer()
    assert journal.flush_if_dirty() and not journal.disk_full
    journal._destroy()
    assert [e[1] for e in GroupCommitJournal(path, None)] == [1, 2, 3, 4, 5]
