"""The Raft journal of a group: pysyncobj's FileJournal, made durable on demand.

Stock FileJournal appends into an mmap that is never flushed, and stores term/vote by renaming a
tmp file without fsync. A kill -9 loses nothing (the page
cache keeps it); a power loss can lose acknowledged entries and a vote.

GroupCommitJournal (fsync="group") only marks itself dirty on every change; the transport flushes
it once per pysyncobj tick, before a follower's acknowledgements leave and before the leader's next
commit scan counts its own log (see transport.GroupCommitTransport). Term and vote are fsynced
before the vote leaves (pysyncobj stores them synchronously; we add the fsync).

Memory: stock FileJournal also keeps every command of the log in a Python list, a second copy of
the file, until compaction; and the pages of the mmap it writes stay in the process's resident set:
together about half of the memory budget of a pending timer on each node (docs/performance.md).
CompactionGuardedJournal keeps only each record's offset, index and term (24 B per entry) and reads
a command back from the mmap when pysyncobj asks for it (the first entry once: journal_first_entry.py);
and it drops from this process's page tables the pages more than RESIDENT_TAIL_BYTES behind what is
written (and, in group mode, flushed). Those pages stay in the page cache (a shared file mapping:
MADV_DONTNEED only unmaps them, and a later read maps the same cached page again), so nothing a kill
-9 could lose changes.

Damage and full disks: every record carries a CRC-32, checked at load and whenever an entry is read
back to apply or replicate; a load that finds damage refuses to start (journal_format.py,
damaged.py). The file grows only into space reserved with posix_fallocate (journal_storage.py), so
a full disk is an error instead of SIGBUS: records that do not fit wait in memory ("spilled"),
never flushed, so never acknowledged, and go to the file as soon as it can grow again.

Which of the two classes a group's journal is, is registered per journal file in journal_factory.py.
"""

from __future__ import annotations

import logging
import mmap
import os
import time

from pysyncobj.journal import FIRST_RECORD_OFFSET, FileJournal
from pysyncobj.pickle import dumps as pysyncobj_dumps

from queen_raft.raft.damaged import DamagedDataError, report_runtime_damage
from queen_raft.raft.flush_times import FlushTimes
from queen_raft.raft.journal_format import (
    CHECKSUMMED_FORMAT,
    RECORD_HEAD,
    RECORD_OVERHEAD_BYTES,
    RECORD_TAIL_BYTES,
    STOCK_RECORD_HEAD,
    encode_journal_record,
    journal_header,
    record_problem,
    scan_records,
)
from queen_raft.raft.journal_first_entry import FirstEntryMemo
from queen_raft.raft.journal_slice import JournalSlice
from queen_raft.raft.journal_spill import SpillOnFullDisk
from queen_raft.raft.journal_storage import CheckedMetaStorer, PreallocatedFile, is_disk_write_error, write_journal_file
from queen_raft.raft.snapshot_reconcile import reconcile_journal_with_snapshot

log = logging.getLogger(__name__)


# The compacted journal is written here, then renamed over the journal.
COMPACTION_SUFFIX = ".compacting"

__all__ = ["JournalSlice", "encode_journal_record"]  # re-exported, with the journal classes below


# The journal's pages this far behind the write offset stay mapped: the leader reads the entries it
# replicates and every node reads the entries it applies from there, right after writing them (a
# dropped page would only cost a minor fault to map again). 256 KiB is ~8 entries of 256 schedule ops.
RESIDENT_TAIL_BYTES = 256 * 1024
# Pages are dropped once this much more was written since the last drop: one madvise per step, and
# the pages it can leave mapped are at most RESIDENT_TAIL_BYTES + this.
RELEASE_STEP_BYTES = 256 * 1024


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory_of(path: str) -> None:
    # A rename is durable only once the directory entry is.
    fsync_path(os.path.dirname(os.path.abspath(path)))


class DurableMetaStorer(CheckedMetaStorer):
    """Term, vote and commit index, written to a tmp file, fsynced, renamed, directory fsynced."""

    def _write(self, meta) -> None:
        path = self.getPath()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(pysyncobj_dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_directory_of(path)


class CompactionGuardedJournal(FirstEntryMemo, SpillOnFullDisk, FileJournal):
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
        # and per record only where it starts, its index and its term. Damage raises DamagedDataError.
        self.journal_path = journalFile
        self.full_dump_file = fullDumpFile
        self._FileJournal__metaStorer = CheckedMetaStorer(journalFile + ".meta")
        self._FileJournal__meta = self._FileJournal__metaStorer.getMeta()
        self._FileJournal__metaSaved = True
        self._forget_empty_journal_of_a_fresh_node()
        self._FileJournal__journalFile = PreallocatedFile(journalFile, journal_header())
        # Records that a full disk could not take: they start at file offset _spill_from.
        self._spill = bytearray()
        self._spill_from: int | None = None
        self.disk_error: OSError | None = None  # the last write error while one is unresolved
        self._disk_error_logged_at = -1e18
        self.compactions_refused = 0
        # Command bytes added since this journal was opened (never decreases): bursts of writes.
        self.bytes_appended = 0
        self.pages_released = 0
        self._released_until = 0
        self.reconciled_with_snapshot = False
        self._FileJournal__currentOffset = self._scan_records()
        if self._format != CHECKSUMMED_FORMAT:
            self._convert_to_checksummed_format()
        if fullDumpFile:
            self._reconcile_with_snapshot()
        self._release_pages_behind()

    def _forget_empty_journal_of_a_fresh_node(self) -> None:
        """A 0-byte journal with no .meta is a first start killed between creating the file and
        writing its header (nothing was ever stored): start afresh. With a .meta it is damage."""
        path = self.journal_path
        if os.path.exists(path) and os.path.getsize(path) == 0 and not os.path.exists(path + ".meta"):
            log.warning("journal %s is empty and no term was ever stored: starting it afresh", path)
            os.remove(path)

    def _mmap(self) -> mmap.mmap:
        # The file replaces its mmap when it cannot resize it in place: look it up each time.
        return self._FileJournal__journalFile.mm

    def _scan_records(self) -> int:
        """Check and index every record in the file (journal_format.scan_records); the end offset."""
        journal_file = self._FileJournal__journalFile
        scanned = scan_records(self._mmap(), len(journal_file.mm), self.journal_path)
        # Checked as found on disk first: reserving may grow the file, and must not hide a short one.
        journal_file.reserve_all(backed_through=scanned.end)
        if scanned.torn_bytes:
            self._FileJournal__setLastRecordOffset(scanned.end)
        self._format = scanned.version
        self._offsets, self._indexes, self._terms = scanned.offsets, scanned.indexes, scanned.terms
        return scanned.end

    def _convert_to_checksummed_format(self) -> None:
        """Rewrite a journal of pysyncobj's format (no checksums) in ours, through a renamed file."""
        count = len(self._offsets)
        try:
            self._rewrite(self[0:count], raise_disk_errors=True)
        except OSError as exc:
            raise RuntimeError(f"cannot rewrite the journal {self.journal_path} with checksums ({exc}); "
                               "free space on its disk and start the node again") from exc
        log.info("journal %s: rewrote %d records of pysyncobj's format with checksums", self.journal_path, count)

    # -- the log pysyncobj sees: (command, index, term) by position ---------------------------------

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def indexes(self) -> list[int]:
        """Each entry's Raft index by position: what self[position][1] reads, without the command."""
        return self._indexes

    @property
    def terms(self) -> list[int]:
        return self._terms

    def __getitem__(self, item):
        if isinstance(item, slice):
            return JournalSlice(self, range(len(self._offsets))[item])
        position = range(len(self._offsets))[item]  # negative positions, IndexError
        return self.first_entry() if position == 0 else self.entry_at(position)

    def entry_at(self, position: int) -> tuple[bytes, int, int]:
        """(command, index, term) of the record at `position`, its checksum checked: an entry read
        back to apply or to replicate is the one that was written, or the node stops (damaged.py)."""
        start = self._offsets[position]
        end = self._offsets[position + 1] if position + 1 < len(self._offsets) else self._FileJournal__currentOffset
        idx, term = self._indexes[position], self._terms[position]
        if self._spill_from is not None and start >= self._spill_from:
            buffer, start, end = self._spill, start - self._spill_from, end - self._spill_from
        else:
            buffer = self._mmap()
        if self._format != CHECKSUMMED_FORMAT:  # only while a stock journal is being converted
            return buffer[start + STOCK_RECORD_HEAD.size : end - RECORD_TAIL_BYTES], idx, term
        command = bytes(buffer[start + RECORD_HEAD.size : end - RECORD_TAIL_BYTES])
        problem = record_problem(bytes(buffer[start : start + RECORD_HEAD.size]), command, idx, term)
        if problem is not None:
            error = DamagedDataError(self.journal_path, self._offsets[position], f"entry {idx} read back: {problem}")
            report_runtime_damage(error)
            raise error
        return command, idx, term

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
        written = self._spill_from if self._spill_from is not None else self._FileJournal__currentOffset
        bound = min(self._release_bound(), written) - RESIDENT_TAIL_BYTES  # the spill is not in the file
        if bound - self._released_until < RELEASE_STEP_BYTES:
            return
        floor = bound - bound % mmap.PAGESIZE
        # From 0, not from the last drop: a catching-up follower's reads may have mapped old pages again.
        self._mmap().madvise(mmap.MADV_DONTNEED, 0, floor)
        self._released_until = floor
        self.pages_released += 1

    def _reconcile_with_snapshot(self) -> None:
        """Fit the journal to the snapshot, or raise DataDirRefused (snapshot_reconcile.py)."""
        reconcile_journal_with_snapshot(self)

    def add(self, command, idx, term):
        record = encode_journal_record(command, idx, term)
        offset = self._FileJournal__currentOffset
        self._write_or_spill(offset, record)
        self._offsets.append(offset)
        self._indexes.append(idx)
        self._terms.append(term)
        self._FileJournal__currentOffset = offset + len(record)
        if self._spill_from is None:
            # The header's end offset never covers a record that is not in the file.
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
        if not self._truncate_spill(end):
            self._FileJournal__setLastRecordOffset(end)
        self._released_until = min(self._released_until, end)

    def deleteEntriesTo(self, entryTo):
        if entryTo >= len(self):
            self.compactions_refused += 1
            log.warning("refused to compact the journal to %d past its end (%d entries)", entryTo, len(self))
            return
        self._before_compaction()
        return self._rewrite(self[entryTo:])

    def _rewrite(self, kept, raise_disk_errors: bool = False) -> bool:
        """Replace the journal by exactly `kept` (entries, read one at a time), through a new file
        renamed into place. On a full disk the journal stays as it was (keeping entries a snapshot
        covers is harmless: the next compaction drops them)."""
        tmp_path = self.journal_path + COMPACTION_SUFFIX
        if os.path.exists(tmp_path):
            os.remove(tmp_path)  # left by a crash during an earlier compaction
        try:
            new_file, offsets, indexes, terms, offset = write_journal_file(tmp_path, kept, self.durable)
        except OSError as exc:
            if raise_disk_errors or not is_disk_write_error(exc):
                raise
            if os.path.exists(tmp_path):
                os.remove(tmp_path)
            self._compaction_did_not_fit(exc)
            return False
        self.compactions_refused_in_a_row = 0
        os.replace(tmp_path, self.journal_path)
        if self.durable:
            fsync_directory_of(self.journal_path)
        self._FileJournal__journalFile._destroy()
        self._FileJournal__journalFile = new_file
        self._offsets, self._indexes, self._terms = offsets, indexes, terms
        self._FileJournal__currentOffset = offset
        self._format = CHECKSUMMED_FORMAT
        if self._spill_from is not None:
            self._spill_from, self._spill = None, bytearray()
            self._disk_write_recovered()
        self._released_until = 0
        self._release_pages_behind()
        return True

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
        self.flush_times = FlushTimes()
        self.flush_failed: OSError | None = None
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
        if not super().deleteEntriesTo(entryTo):
            return False  # refused (past the end, or a full disk): what was pending still is
        # The rewritten journal was flushed before the rename: nothing of it is pending any more.
        self.dirty = False
        self._flushed_offset = self._FileJournal__currentOffset
        self._release_pages_behind()
        return True

    def deleteEntriesFrom(self, entryFrom):
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def _truncate(self, keep: int) -> None:
        written = self._spill_from if self._spill_from is not None else self._FileJournal__currentOffset
        super()._truncate(keep)
        end = self._FileJournal__currentOffset
        # Entries written after this go where the flushed ones were: they are not flushed yet.
        self._flushed_offset = min(self._flushed_offset, end)
        if written > end:
            # A power loss before the next flush could leave, sector by sector, the old records and
            # the new ones there: a tail that reads as damage. Zeros made durable first make any
            # unwritten sector of the new records read as zeros: a torn tail (journal_format.py).
            self._FileJournal__journalFile.zero(end, written)
            self.dirty = True
            self.flush_if_dirty()

    def flush_if_dirty(self) -> bool:
        """fdatasync what changed; False when nothing did or it could not: the journal then stays
        dirty and the transport keeps holding acknowledgements. A failed fdatasync is final for this
        process (Linux may mark the pages it failed to write clean, so a later success proves
        nothing): no more acknowledgements until a restart, which checks every record again."""
        if not self.dirty or self.flush_failed is not None:
            return False
        if not self.write_spilled_records():
            return False
        started = time.perf_counter()
        try:
            self.sync_to_disk()
        except OSError as exc:
            self.flush_failed = exc
            self._disk_write_failed(exc)
            log.critical("journal %s: fdatasync failed (%s); this node acknowledges nothing more until it is "
                         "restarted", self.journal_path, exc)
            return False
        self.flush_times.observe(time.perf_counter() - started)
        self.dirty = False
        self.flushes += 1
        self._flushed_offset = self._FileJournal__currentOffset
        self._release_pages_behind()
        return True

    @property
    def disk_full(self) -> bool:
        return super().disk_full or self.flush_failed is not None

    def _disk_write_recovered(self) -> None:
        if self.flush_failed is None:
            super()._disk_write_recovered()

    def journal_fileno(self) -> int:
        return self._FileJournal__journalFile.file.fileno()

    def sync_to_disk(self) -> None:
        """fdatasync(2) of the journal file: what msync(MS_SYNC) of its mapping makes durable, GIL released.

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

        Why: CPython 3.11's mmap.flush holds the GIL during msync, and under load the flushes took a
        large share of the leader's GIL time, in which the loop thread (HTTP, handlers) could not run
        (docs/performance.md). The price is that the tick thread must take the GIL back after the
        syscall; node.py shortens the switch interval (GIL_SWITCH_INTERVAL_S) so that it does not
        queue 5 ms for it behind the busy loop thread (else fdatasync was slower than msync under load).
        """
        os.fdatasync(self.journal_fileno())
