"""The journal's memory: commands are read back from the file instead of kept in a list, and
written pages leave the resident set, with the file, its format and what a kill -9 keeps unchanged."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import textwrap
import tracemalloc

import pytest
from pysyncobj.journal import FileJournal, ResizableFile

from queen_raft.raft.journal import (
    RELEASE_STEP_BYTES,
    RESIDENT_TAIL_BYTES,
    CompactionGuardedJournal,
    GroupCommitJournal,
    JournalSlice,
)

ENTRY_BYTES = 16 * 1024
# Enough entries that most of the file lies more than RESIDENT_TAIL_BYTES + a step behind its end.
ENTRY_COUNT = 4 * (RESIDENT_TAIL_BYTES + RELEASE_STEP_BYTES) // ENTRY_BYTES
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(idx: int, size: int = ENTRY_BYTES) -> bytes:
    return b"\x00" + idx.to_bytes(4, "little") * (size // 4)


def mapped_rss_bytes(path: str) -> int:
    """Resident bytes of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) > 5 and fields[5] == os.path.abspath(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_the_mmap_and_its_madvise_are_where_the_journal_reaches_for_them(tmp_path):
    # CompactionGuardedJournal reads ResizableFile's private mmap; pysyncobj 0.3.17 names it __mm.
    resizable = ResizableFile(str(tmp_path / "f"), defaultContent=b"header")
    assert isinstance(resizable._ResizableFile__mm, mmap.mmap)
    assert hasattr(mmap, "MADV_DONTNEED") and hasattr(resizable._ResizableFile__mm, "madvise")
    resizable._destroy()


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_entries_read_back_equal_what_was_added_and_a_stock_journal_still_loads(tmp_path, kind):
    path = str(tmp_path / "j")
    journal = kind(path, None)
    added = [(command(i, 40 + i), i, 1 + i // 5) for i in range(1, 21)]
    for entry in added:
        journal.add(*entry)
    assert len(journal) == 20
    assert journal[0] == added[0] and journal[-1] == added[-1] and list(journal) == added
    assert journal[3:7] == added[3:7] and journal[-3:] == added[-3:] and journal[25:] == []
    assert isinstance(journal[5:], JournalSlice) and journal[5:][1:3] == added[6:8]
    assert journal.size_bytes == sum(len(entry[0]) for entry in added)
    with pytest.raises(IndexError):
        journal[20]
    journal.flush()
    journal._destroy()
    assert list(kind(path, None)) == added
    # A journal pysyncobj wrote (no checksums) loads, with the entries appended after it.
    stock_path = str(tmp_path / "stock")
    stock = FileJournal(stock_path)
    for entry in added:
        stock.add(*entry)
    stock._destroy()
    reopened = kind(stock_path, None)
    assert list(reopened) == added
    reopened.add(command(21, 10), 21, 5)
    reopened._destroy()
    assert list(kind(stock_path, None)) == added + [(command(21, 10), 21, 5)]


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_truncation_clear_and_compaction_keep_the_index_and_the_file_in_step(tmp_path, kind):
    path = str(tmp_path / "j")
    journal = kind(path, None)
    added = [(command(i, 100), i, 1) for i in range(1, 11)]
    for entry in added:
        journal.add(*entry)
    journal.deleteEntriesFrom(7)  # a follower's conflicting suffix
    journal.add(command(8, 30), 8, 2)
    assert list(journal) == added[:7] + [(command(8, 30), 8, 2)]
    journal.deleteEntriesTo(3)  # compaction
    assert list(journal) == added[3:7] + [(command(8, 30), 8, 2)]
    assert journal.size_bytes == 4 * len(added[0][0]) + len(command(8, 30))
    journal._destroy()
    reopened = kind(path, None)
    assert list(reopened) == added[3:7] + [(command(8, 30), 8, 2)]
    reopened.clear()  # a snapshot installed from the leader
    assert len(reopened) == 0 and reopened.size_bytes == 0
    reopened.add(command(40, 20), 40, 3)
    reopened._destroy()
    assert list(kind(path, None)) == [(command(40, 20), 40, 3)]


def test_the_log_keeps_no_copy_of_its_commands_in_memory(tmp_path):
    journal = CompactionGuardedJournal(str(tmp_path / "j"), None)
    journal.add(command(0, 64), 1, 1)  # the first growth of the index arrays
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for idx in range(2, 202):
            journal.add(command(idx), idx, 1)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Stock FileJournal holds every command (16 KiB each here) plus a tuple; this one 24 B of index.
    per_entry = (after - before) / 200
    assert per_entry < 100, per_entry
    journal._destroy()


def test_written_pages_leave_the_resident_set_in_off_mode(tmp_path):
    path = str(tmp_path / "j")
    journal = CompactionGuardedJournal(path, None)
    for idx in range(1, ENTRY_COUNT + 1):
        journal.add(command(idx), idx, 1)
    written = ENTRY_COUNT * ENTRY_BYTES
    assert journal.pages_released > 0
    assert mapped_rss_bytes(path) <= RESIDENT_TAIL_BYTES + RELEASE_STEP_BYTES + 2 * mmap.PAGESIZE < written // 2
    # Dropped pages come back from the page cache when read.
    assert journal[0] == (command(1), 1, 1) and journal[ENTRY_COUNT // 2][1] == ENTRY_COUNT // 2 + 1
    journal._destroy()


def test_group_mode_keeps_unflushed_pages_mapped_until_the_flush(tmp_path):
    path = str(tmp_path / "j")
    journal = GroupCommitJournal(path, None)
    for idx in range(1, ENTRY_COUNT + 1):
        journal.add(command(idx), idx, 1)
    written = ENTRY_COUNT * ENTRY_BYTES
    assert journal.pages_released == 0
    assert mapped_rss_bytes(path) >= written
    assert journal.flush_if_dirty()
    assert journal.pages_released == 1
    assert mapped_rss_bytes(path) <= RESIDENT_TAIL_BYTES + 2 * mmap.PAGESIZE
    journal._destroy()


def test_a_compacted_journal_starts_with_its_pages_released(tmp_path):
    path = str(tmp_path / "j")
    journal = CompactionGuardedJournal(path, None)
    for idx in range(1, ENTRY_COUNT + 1):
        journal.add(command(idx), idx, 1)
    journal.deleteEntriesTo(2)
    assert journal[0][1] == 3 and len(journal) == ENTRY_COUNT - 2
    assert mapped_rss_bytes(path) <= RESIDENT_TAIL_BYTES + RELEASE_STEP_BYTES + 2 * mmap.PAGESIZE
    journal._destroy()


@pytest.mark.parametrize("fsync", ["off", "group"])
def test_entries_whose_pages_were_released_survive_a_kill_9(tmp_path, fsync):
    # The child adds entries (flushing in group mode as the transport does once per tick), so most
    # pages are released from its mapping, then kills itself: the page cache must still hold them.
    path = str(tmp_path / "j")
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {REPO!r})
        from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
        ENTRY_BYTES, ENTRY_COUNT = {ENTRY_BYTES}, {ENTRY_COUNT}
        def command(idx, size=ENTRY_BYTES):
            return b"\\x00" + idx.to_bytes(4, "little") * (size // 4)
        journal = ({'GroupCommitJournal' if fsync == 'group' else 'CompactionGuardedJournal'})({path!r}, None)
        for idx in range(1, ENTRY_COUNT + 1):
            journal.add(command(idx), idx, 1)
            if {fsync == 'group'} and idx % 4 == 0:
                journal.flush_if_dirty()
        assert journal.pages_released > 0
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    reopened = CompactionGuardedJournal(path, None)
    assert len(reopened) == ENTRY_COUNT
    assert all(reopened[i] == (command(i + 1), i + 1, 1) for i in range(ENTRY_COUNT))
    reopened._destroy()
