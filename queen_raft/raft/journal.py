"""The Raft journal of a group: pysyncobj's FileJournal, made durable on demand.

Stock FileJournal appends into an mmap that is never flushed, and stores term/vote by renaming a
tmp file without fsync (research/pysyncobj-measured.md section 3). A kill -9 loses nothing (the page
cache keeps it); a power loss can lose acknowledged entries and a vote.

GroupCommitJournal (fsync="group") only marks itself dirty on every change; the transport flushes
it once per pysyncobj tick, before a follower's acknowledgements leave and before the leader's next
commit scan counts its own log (see transport.GroupCommitTransport). Term and vote are fsynced
before the vote leaves (pysyncobj stores them synchronously; we add the fsync).

Memory (issue 6): stock FileJournal also keeps every command of the log in a Python list, a second
copy of the file, until compaction; and the pages of the mmap it writes stay in the process's resident
set. With 256-op schedule entries both came to ~240 B per pending timer on each node (measured:
smaps of the journal mapping and tracemalloc of the log's bytes, 20,000 timers). CompactionGuardedJournal
keeps only each record's offset, index and term (24 B per entry) and reads a command back from the
mmap when pysyncobj asks for it; and it drops from this process's page tables the pages more than
RESIDENT_TAIL_BYTES behind what is written (and, in group mode, flushed). Those pages stay in the page
cache (a shared file mapping: MADV_DONTNEED only unmaps them, and a later read maps the same cached
page again), so nothing a kill -9 could lose changes.

pysyncobj creates its journal through the module global `pysyncobj.syncobj.createJournal`;
`install_journal_factory` replaces it with one that looks up the kind registered for the journal
path, so each group picks its own mode.
"""

from __future__ import annotations

import gzip
import logging
import mmap
import os
import struct
import threading
from array import array
from collections.abc import Sequence

import pysyncobj.syncobj
from pysyncobj.journal import (
    FIRST_RECORD_OFFSET,
    LAST_RECORD_OFFSET_OFFSET,
    FileJournal,
    MemoryJournal,
    MetaStorer,
    ResizableFile,
)
from pysyncobj.pickle import dumps as pysyncobj_dumps
from pysyncobj.pickle import load as pysyncobj_load
from pysyncobj.pickle import to_bytes

log = logging.getLogger(__name__)


# The compacted journal is written here, then renamed over the journal.
COMPACTION_SUFFIX = ".compacting"

# A record is <I len, <QQ idx term, command, <I len (FileJournal's format, kept byte for byte).
RECORD_HEAD = struct.Struct("<IQQ")
RECORD_TAIL_BYTES = 4
RECORD_OVERHEAD_BYTES = RECORD_HEAD.size + RECORD_TAIL_BYTES

# The journal's pages this far behind the write offset stay mapped: the leader reads the entries it
# replicates and every node reads the entries it applies from there, right after writing them (a
# dropped page would only cost a minor fault to map again). 256 KiB is ~8 entries of 256 schedule ops.
RESIDENT_TAIL_BYTES = 256 * 1024
# Pages are dropped once this much more was written since the last drop: one madvise per step, and
# the pages it can leave mapped are at most RESIDENT_TAIL_BYTES + this.
RELEASE_STEP_BYTES = 256 * 1024


def encode_journal_record(command: bytes, idx: int, term: int) -> bytes:
    """One record in FileJournal's format: <I len, <QQ idx term, command, <I len (as its add())."""
    command = to_bytes(command)
    length = struct.pack("<I", len(command) + 16)
    return b"".join((length, struct.pack("<QQ", idx, term), command, length))


class JournalSlice(Sequence):
    """A run of journal entries, each read from the file when asked for (slicing one gives a list).

    pysyncobj slices the log to pick what to send and to apply (`log[diff:]`, then trims the result to
    a byte budget): reading every command of a long tail up front would copy it all on every send.
    Use a slice at once: it reads by position, and a later compaction moves positions.
    """

    __slots__ = ("_journal", "_positions")

    def __init__(self, journal: "CompactionGuardedJournal", positions: range) -> None:
        self._journal = journal
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self._journal.entry_at(p) for p in self._positions[item]]
        return self._journal.entry_at(self._positions[item])

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, JournalSlice)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"JournalSlice({list(self)!r})"


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory_of(path: str) -> None:
    # A rename is durable only once the directory entry is.
    fsync_path(os.path.dirname(os.path.abspath(path)))


class DurableMetaStorer(MetaStorer):
    """Term, vote and commit index, written to a tmp file, fsynced, renamed, directory fsynced."""

    def storeMeta(self, meta):
        path = self.getPath()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pysyncobj_dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_directory_of(path)


class CompactionGuardedJournal(FileJournal):
    """FileJournal whose compaction can neither cut past the end nor lose the tail on a crash.

    - Past the end: seen once under a follower burst with compaction running, a snapshot install
      shrank the log while a local compaction was pending, then deleteEntriesTo(serializeID) cut
      past the end, the log became empty and every tick raised IndexError. We keep the entries: the
      snapshot covers them and the next compaction removes them.
    - Crash safety: stock deleteEntriesTo rewrites the journal in place (header reset to empty, then
      each kept entry re-added), so a kill -9 in the middle leaves only part of the un-snapshotted
      tail. We write the kept entries to a new file and rename it over the journal: a crash leaves
      either the old journal or the new one, both whole.
    """

    # Durable compaction (flush the new file, fsync the directory) only in group mode.
    durable = False

    def __init__(self, journalFile, fullDumpFile=None):
        # FileJournal.__init__ without its list of every command: the same file, meta and offset,
        # and per record only where it starts, its index and its term.
        self._FileJournal__journalFile = ResizableFile(journalFile, defaultContent=self._FileJournal__getDefaultHeader())
        self._FileJournal__metaStorer = MetaStorer(journalFile + ".meta")
        self._FileJournal__meta = self._FileJournal__metaStorer.getMeta()
        self._FileJournal__metaSaved = True
        self._offsets = array("Q")
        self._indexes = array("Q")
        self._terms = array("Q")
        self._FileJournal__currentOffset = self._scan_records()
        self.journal_path = journalFile
        self.full_dump_file = fullDumpFile
        self.compactions_refused = 0
        # Command bytes added since this journal was opened (never decreases): bursts of writes.
        self.bytes_appended = 0
        self.pages_released = 0
        self._released_until = 0
        self.reconciled_with_snapshot = False
        if fullDumpFile and os.path.exists(fullDumpFile):
            self._reconcile_with_snapshot()
        self._release_pages_behind()

    def _mmap(self) -> mmap.mmap:
        # ResizableFile replaces its mmap when it has to grow the file by appending: look it up each time.
        return self._FileJournal__journalFile._ResizableFile__mm

    def _scan_records(self) -> int:
        """Index every record in the file (as FileJournal.__init__ reads them); the end offset."""
        mapped = self._mmap()
        offset = FIRST_RECORD_OFFSET
        end = self._FileJournal__getLastRecordOffset()
        while offset < end:
            size, idx, term = RECORD_HEAD.unpack_from(mapped, offset)
            self._offsets.append(offset)
            self._indexes.append(idx)
            self._terms.append(term)
            offset += size + 8
        return offset

    # -- the log pysyncobj sees: (command, index, term) by position ---------------------------------

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return JournalSlice(self, range(len(self._offsets))[item])
        return self.entry_at(range(len(self._offsets))[item])  # negative positions, IndexError

    def entry_at(self, position: int) -> tuple[bytes, int, int]:
        start = self._offsets[position]
        end = self._offsets[position + 1] if position + 1 < len(self._offsets) else self._FileJournal__currentOffset
        command = self._mmap()[start + RECORD_HEAD.size : end - RECORD_TAIL_BYTES]
        return command, self._indexes[position], self._terms[position]

    @property
    def size_bytes(self) -> int:
        """Bytes of commands in the log: the transport forces a compaction past
        LOG_COMPACTION_MAX_BYTES (journal offsets are uint32), since pysyncobj compacts by count."""
        return self._FileJournal__currentOffset - FIRST_RECORD_OFFSET - RECORD_OVERHEAD_BYTES * len(self._offsets)

    # -- pages --------------------------------------------------------------------------------------

    def _release_bound(self) -> int:
        """Pages below this offset may leave the resident set (group mode: only flushed ones)."""
        return self._FileJournal__currentOffset

    def _release_pages_behind(self) -> None:
        bound = self._release_bound() - RESIDENT_TAIL_BYTES
        if bound - self._released_until < RELEASE_STEP_BYTES:
            return
        floor = bound - bound % mmap.PAGESIZE
        # From 0, not from the last drop: a catching-up follower's reads may have mapped old pages again.
        self._mmap().madvise(mmap.MADV_DONTNEED, 0, floor)
        self._released_until = floor
        self.pages_released += 1

    def _reconcile_with_snapshot(self) -> None:
        """Keep the journal's tail when the process died between a snapshot and its compaction.

        The forked child renames the new snapshot into place; the tick thread compacts the journal
        a tick later. Killed in between, the node restarts with a snapshot newer than the journal's
        head, and pysyncobj (which requires journal[0:2] == the snapshot's last two entries) then
        clears the journal down to those two entries: every entry after them is lost on this node.
        Measured: three nodes killed together under writes each land in that window about one time
        in three, and acknowledged writes were lost when two did. Raft's rule for a snapshot whose
        last entry is in the log (same index and term) is to keep the entries that follow it, so we
        rewrite the journal as [prev, last, entries after last], which pysyncobj then accepts.
        """
        try:
            with gzip.open(self.full_dump_file, "rb") as dump:
                _, last, prev, _ = pysyncobj_load(dump)
        except Exception:
            log.exception("could not read the snapshot %s to reconcile the journal", self.full_dump_file)
            return
        prev, last = tuple(prev), tuple(last)
        entries = [tuple(entry) for entry in self]
        if entries[:2] == [prev, last]:
            return
        position = next((i for i, entry in enumerate(entries) if entry[1] == last[1]), None)
        if position is None or entries[position] != last:
            return  # the log holds nothing after the snapshot, or conflicts with it: stock behaviour
        self._rewrite([prev, last] + entries[position + 1 :])
        self.reconciled_with_snapshot = True
        log.warning("journal reconciled with the snapshot at index %d: kept %d later entries",
                    last[1], len(entries) - position - 1)

    def add(self, command, idx, term):
        record = encode_journal_record(command, idx, term)
        offset = self._FileJournal__currentOffset
        self._FileJournal__journalFile.write(offset, record)
        self._offsets.append(offset)
        self._indexes.append(idx)
        self._terms.append(term)
        self._FileJournal__currentOffset = offset + len(record)
        self._FileJournal__setLastRecordOffset(self._FileJournal__currentOffset)
        self.bytes_appended += len(record) - RECORD_OVERHEAD_BYTES
        self._release_pages_behind()

    def clear(self):
        self._truncate(0)

    def deleteEntriesFrom(self, entryFrom):
        self._truncate(entryFrom)  # rare: a follower's log conflict

    def _truncate(self, keep: int) -> None:
        if keep >= len(self._offsets):
            return
        end = self._offsets[keep] if keep > 0 else FIRST_RECORD_OFFSET
        del self._offsets[keep:], self._indexes[keep:], self._terms[keep:]
        self._FileJournal__currentOffset = end
        self._FileJournal__setLastRecordOffset(end)
        self._released_until = min(self._released_until, end)

    def deleteEntriesTo(self, entryTo):
        if entryTo >= len(self):
            self.compactions_refused += 1
            log.warning("refused to compact the journal to %d past its end (%d entries)", entryTo, len(self))
            return
        self._before_compaction()
        self._rewrite(self[entryTo:])

    def _rewrite(self, kept) -> None:
        """Replace the journal by exactly `kept` (entries, read one at a time), through a new file
        renamed into place."""
        tmp_path = self.journal_path + COMPACTION_SUFFIX
        if os.path.exists(tmp_path):
            os.remove(tmp_path)  # left by a crash during an earlier compaction
        new_file = ResizableFile(tmp_path, defaultContent=self._FileJournal__getDefaultHeader())
        offsets, indexes, terms = array("Q"), array("Q"), array("Q")
        offset = FIRST_RECORD_OFFSET
        for position in range(len(kept)):
            command, idx, term = kept[position]
            record = encode_journal_record(command, idx, term)
            new_file.write(offset, record)
            offsets.append(offset)
            indexes.append(idx)
            terms.append(term)
            offset += len(record)
        new_file.write(LAST_RECORD_OFFSET_OFFSET, struct.pack("<I", offset))
        if self.durable:
            new_file.flush()
        os.replace(tmp_path, self.journal_path)
        if self.durable:
            fsync_directory_of(self.journal_path)
        self._FileJournal__journalFile._destroy()
        self._FileJournal__journalFile = new_file
        self._offsets, self._indexes, self._terms = offsets, indexes, terms
        self._FileJournal__currentOffset = offset
        self._released_until = 0
        self._release_pages_behind()

    def _before_compaction(self) -> None:
        pass


class GroupCommitJournal(CompactionGuardedJournal):
    """Marks itself dirty on every change; flush_if_dirty() makes the changes durable (fdatasync)."""

    durable = True

    def __init__(self, journalFile, fullDumpFile=None):
        super().__init__(journalFile, fullDumpFile)
        self._FileJournal__metaStorer = DurableMetaStorer(journalFile + ".meta")
        self.dirty = False
        self.flushes = 0
        # What the last flush made durable (all of it: the journal opened from disk).
        self._flushed_offset = self._FileJournal__currentOffset
        self._release_pages_behind()

    def _release_bound(self) -> int:
        # Unflushed pages stay mapped until flush_if_dirty has synced them. (Dropping them would
        # lose nothing either, they are the page cache's dirty pages; this keeps the argument simple.)
        return min(getattr(self, "_flushed_offset", 0), self._FileJournal__currentOffset)

    def add(self, command, idx, term):
        super().add(command, idx, term)
        self.dirty = True

    def _make_snapshot_durable(self) -> None:
        if self.full_dump_file and os.path.exists(self.full_dump_file):
            fsync_path(self.full_dump_file)
            fsync_directory_of(self.full_dump_file)

    def clear(self):
        # pysyncobj clears the journal when it installs a snapshot sent by the leader, right after
        # renaming the received file into place without fsync. Make the snapshot durable before
        # the journal forgets what it covers.
        self._make_snapshot_durable()
        super().clear()
        self.dirty = True

    def _before_compaction(self) -> None:
        # Compaction runs right after the forked child renamed the new snapshot into place without
        # fsync: the same rule.
        self._make_snapshot_durable()

    def deleteEntriesTo(self, entryTo):
        super().deleteEntriesTo(entryTo)
        # The rewritten journal was flushed before the rename: nothing of it is pending any more.
        self.dirty = False
        self._flushed_offset = self._FileJournal__currentOffset
        self._release_pages_behind()

    def deleteEntriesFrom(self, entryFrom):
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def _truncate(self, keep: int) -> None:
        super()._truncate(keep)
        # Entries written after this go where the flushed ones were: they are not flushed yet.
        self._flushed_offset = min(self._flushed_offset, self._FileJournal__currentOffset)

    def flush_if_dirty(self) -> bool:
        if not self.dirty:
            return False
        self.sync_to_disk()
        self.dirty = False
        self.flushes += 1
        self._flushed_offset = self._FileJournal__currentOffset
        self._release_pages_behind()
        return True

    def journal_fileno(self) -> int:
        # ResizableFile reopens its file when it has to grow it by appending: look it up each time.
        return self._FileJournal__journalFile._ResizableFile__f.fileno()

    def sync_to_disk(self) -> None:
        """fdatasync(2) of the journal file: what msync(MS_SYNC) of its mapping makes durable, with
        the GIL released during the syscall.

        The same durability as pysyncobj's flush (mmap.flush: msync of the whole mapping). On Linux,
        msync(MS_SYNC) of a shared file mapping calls vfs_fsync_range(file, start, end, datasync=1)
        for the mapped range (mm/msync.c); fdatasync calls vfs_fsync_range(file, 0, LLONG_MAX,
        datasync=1) (fs/sync.c): the same call over the whole file, and the mapping covers the whole
        file (ResizableFile maps self.__f from offset 0 and remaps it whenever it grows it). A store
        through a MAP_SHARED mapping dirties the file's own page-cache page (the write fault marks it
        dirty; there is no private copy), and those dirty pages are what vfs_fsync_range writes back
        and waits for, before the device cache flush: the records and the header's last-record
        offset. tests/unit/test_raft_journal_flush.py checks that no page written through the
        mapping is left dirty, as after msync.

        Why: CPython 3.11's mmap.flush holds the GIL during msync, and under load the flushes took
        a large share of the leader's GIL time, in which the loop thread (HTTP, handlers) could not
        run (docs/performance.md). The price is that the tick thread must take the GIL back after
        the syscall; node.py shortens the switch interval (GIL_SWITCH_INTERVAL_S) so that it does
        not queue 5 ms for it behind the busy loop thread (without that, fdatasync was slower than
        msync under load).
        """
        os.fdatasync(self.journal_fileno())


_JOURNAL_KINDS = {"group": GroupCommitJournal, "off": CompactionGuardedJournal}
_registry_lock = threading.Lock()
_registered: dict[str, tuple[type, str | None]] = {}  # journal path -> (class, full dump path)


def register_journal(journal_file: str, fsync: str, full_dump_file: str | None) -> None:
    with _registry_lock:
        _registered[os.path.abspath(journal_file)] = (_JOURNAL_KINDS[fsync], full_dump_file)


def unregister_journal(journal_file: str) -> None:
    with _registry_lock:
        _registered.pop(os.path.abspath(journal_file), None)


def create_journal(journalFile=None):
    """Replacement for pysyncobj.syncobj.createJournal (same signature)."""
    if journalFile is None:
        return MemoryJournal()
    with _registry_lock:
        kind, full_dump_file = _registered.get(os.path.abspath(journalFile), (CompactionGuardedJournal, None))
    return kind(journalFile, full_dump_file)


def install_journal_factory() -> None:
    pysyncobj.syncobj.createJournal = create_journal
