"""The group-commit flush writes back every page written through the journal's mapping.

GroupCommitJournal.flush_if_dirty is what makes an entry durable before a follower acknowledges it
and before the leader counts itself. These tests read the mapping's dirty pages from
/proc/self/smaps: after the flush none may be left, also when the file grew on the way and when
the file was remapped (a flush of the old mapping or of a partial range would leave
pages dirty here). The flush is os.fdatasync of the journal file, which releases the GIL, instead
of pysyncobj's mmap.flush (msync, which holds it): these pin that it still cleans what msync did.
"""

from __future__ import annotations

import mmap
import os
import re

from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_storage import PreallocatedFile

SMAPS_RANGE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ", re.M)
SMAPS_DIRTY = re.compile(r"^(?:Shared|Private)_Dirty:\s+(\d+) kB", re.M)
# ~200 KiB of records: the file starts at 1 KiB, so it is resized several times on the way.
RECORDS = 199
RECORD_BYTES = 1000


def dirty_kib_of_mapping(path: str) -> int:
    """Dirty kB of this process's mappings of `path`: pages written through the mapping and not
    written back yet (writeback, by msync or fdatasync, cleans them)."""
    with open("/proc/self/smaps") as smaps_file:
        smaps = smaps_file.read()
    starts = [m.start() for m in SMAPS_RANGE.finditer(smaps)] + [len(smaps)]
    blocks = [smaps[begin:end] for begin, end in zip(starts, starts[1:])]
    mine = [block for block in blocks if block.split("\n", 1)[0].endswith(" " + path)]
    assert mine, f"{path} is not mapped"
    return sum(int(kib) for block in mine for kib in SMAPS_DIRTY.findall(block))


def command(idx: int) -> bytes:
    return b"\x00" + bytes([idx % 256]) * RECORD_BYTES


def test_flush_leaves_no_page_dirty_that_was_written_through_the_mapping(tmp_path):
    path = str(tmp_path / "journal")
    journal = GroupCommitJournal(path, None)
    for idx in range(1, RECORDS + 1):
        journal.add(command(idx), idx, 1)
    assert dirty_kib_of_mapping(path) > 0
    assert journal.flush_if_dirty()
    assert dirty_kib_of_mapping(path) == 0
    journal._destroy()
    reopened = CompactionGuardedJournal(path)
    assert [entry[1] for entry in reopened] == list(range(1, RECORDS + 1))
    assert reopened[-1][0] == command(RECORDS)


def test_every_flush_cleans_what_was_written_since_the_last_one(tmp_path):
    path = str(tmp_path / "journal")
    journal = GroupCommitJournal(path, None)
    for idx in range(1, RECORDS + 1):
        journal.add(command(idx), idx, 1)
        if idx % 50 == 0:
            assert journal.flush_if_dirty()
            assert dirty_kib_of_mapping(path) == 0
    assert journal.flushes == RECORDS // 50
    journal._destroy()


def test_flush_follows_the_mapping_when_the_file_remaps_it(tmp_path):
    # PreallocatedFile maps the file anew when mmap.resize cannot grow the mapping in place: the
    # flush must write back through the mapping in use now.
    path = str(tmp_path / "journal")
    journal = GroupCommitJournal(path, None)
    preallocated = journal._FileJournal__journalFile
    old_mapping = preallocated.mm
    preallocated.mm.close()
    preallocated.mm = mmap.mmap(preallocated.file.fileno(), 0)
    assert preallocated.mm is not old_mapping
    journal.add(b"\x00" + b"z" * 70_000, 1, 1)  # lands past the old end of the file
    assert dirty_kib_of_mapping(path) > 0
    assert journal.flush_if_dirty()
    assert dirty_kib_of_mapping(path) == 0
    journal._destroy()
    assert [entry[1] for entry in CompactionGuardedJournal(path)] == [1]


def test_flush_is_an_fdatasync_of_the_journal_file_not_the_gil_holding_msync(tmp_path, monkeypatch):
    # CPython 3.11's mmap.flush (msync) holds the GIL for the syscall; os.fdatasync releases it.
    path = str(tmp_path / "journal")
    journal = GroupCommitJournal(path, None)
    synced_inodes: list[int] = []
    msyncs: list[object] = []
    real_fdatasync = os.fdatasync
    real_msync = PreallocatedFile.flush

    def recording_fdatasync(fd):
        synced_inodes.append(os.fstat(fd).st_ino)
        real_fdatasync(fd)

    def recording_msync(resizable):
        msyncs.append(resizable)
        real_msync(resizable)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    monkeypatch.setattr(PreallocatedFile, "flush", recording_msync)
    journal.add(command(1), 1, 1)
    assert journal.flush_if_dirty()
    assert synced_inodes == [os.stat(path).st_ino] and msyncs == []
    assert not journal.flush_if_dirty()  # nothing new: no second sync
    assert synced_inodes == [os.stat(path).st_ino]
    journal._destroy()
