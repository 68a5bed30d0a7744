"""The Raft journal of a group: pysyncobj's FileJournal, made durable on demand.

Stock FileJournal appends into an mmap that is never flushed, and stores term/vote by renaming a
tmp file without fsync (research/pysyncobj-measured.md section 3). A kill -9 loses nothing (the page
cache keeps it); a power loss can lose acknowledged entries and a vote.

GroupCommitJournal (fsync="group") only marks itself dirty on every change; the transport flushes
it once per pysyncobj tick, before a follower's acknowledgements leave and before the leader's next
commit scan counts its own log (see transport.GroupCommitTransport). Term and vote are fsynced
before the vote leaves (pysyncobj stores them synchronously; we add the fsync).

pysyncobj creates its journal through the module global `pysyncobj.syncobj.createJournal`;
`install_journal_factory` replaces it with one that looks up the kind registered for the journal
path, so each group picks its own mode.
"""

from __future__ import annotations

import gzip
import logging
import os
import struct
import threading

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


def encode_journal_record(command: bytes, idx: int, term: int) -> bytes:
    """One record in FileJournal's format: <I len, <QQ idx term, command, <I len (as its add())."""
    body = struct.pack("<QQ", idx, term) + to_bytes(command)
    length = struct.pack("<I", len(body))
    return length + body + length


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
        super().__init__(journalFile)
        self.journal_path = journalFile
        self.full_dump_file = fullDumpFile
        self.compactions_refused = 0
        # Bytes of commands in the log (pysyncobj keeps them all in RAM too): the transport forces
        # a compaction when this passes LOG_COMPACTION_MAX_BYTES, since pysyncobj compacts by count.
        self.size_bytes = sum(len(entry[0]) for entry in self)
        self.reconciled_with_snapshot = False
        if fullDumpFile and os.path.exists(fullDumpFile):
            self._reconcile_with_snapshot()

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
        entries = [tuple(entry) for entry in self._FileJournal__journal]
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
        super().add(command, idx, term)
        self.size_bytes += len(command)

    def clear(self):
        super().clear()
        self.size_bytes = 0

    def deleteEntriesFrom(self, entryFrom):
        super().deleteEntriesFrom(entryFrom)
        self.size_bytes = sum(len(entry[0]) for entry in self)  # rare: a follower's log conflict

    def deleteEntriesTo(self, entryTo):
        if entryTo >= len(self):
            self.compactions_refused += 1
            log.warning("refused to compact the journal to %d past its end (%d entries)", entryTo, len(self))
            return
        self._before_compaction()
        self._rewrite(self._FileJournal__journal[entryTo:])

    def _rewrite(self, kept: list) -> None:
        """Replace the journal by exactly `kept`, through a new file renamed into place."""
        tmp_path = self.journal_path + COMPACTION_SUFFIX
        if os.path.exists(tmp_path):
            os.remove(tmp_path)  # left by a crash during an earlier compaction
        new_file = ResizableFile(tmp_path, defaultContent=self._FileJournal__getDefaultHeader())
        offset = FIRST_RECORD_OFFSET
        for command, idx, term in kept:
            record = encode_journal_record(command, idx, term)
            new_file.write(offset, record)
            offset += len(record)
        new_file.write(LAST_RECORD_OFFSET_OFFSET, struct.pack("<I", offset))
        if self.durable:
            new_file.flush()
        os.replace(tmp_path, self.journal_path)
        if self.durable:
            fsync_directory_of(self.journal_path)
        self._FileJournal__journalFile._destroy()
        self._FileJournal__journalFile = new_file
        self._FileJournal__journal = list(kept)
        self._FileJournal__currentOffset = offset
        self.size_bytes = sum(len(entry[0]) for entry in kept)

    def _before_compaction(self) -> None:
        pass


class GroupCommitJournal(CompactionGuardedJournal):
    """Marks itself dirty on every change; flush_if_dirty() makes the changes durable (msync)."""

    durable = True

    def __init__(self, journalFile, fullDumpFile=None):
        super().__init__(journalFile, fullDumpFile)
        self._FileJournal__metaStorer = DurableMetaStorer(journalFile + ".meta")
        self.dirty = False
        self.flushes = 0

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

    def deleteEntriesFrom(self, entryFrom):
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def flush_if_dirty(self) -> bool:
        if not self.dirty:
            return False
        # mmap.flush (msync of the whole map) holds the GIL for the syscall. os.fdatasync of the
        # file is the same vfs_fsync_range on Linux and releases the GIL, but measured through HTTP
        # (32 single-op clients, three alternating A/B rounds, load 6) it was slower: 583-708 calls/s
        # against 909-1,455. The likely cause: after the syscall the tick thread queues for the GIL
        # behind the busy loop thread (up to the 5 ms switch interval), and every commit waits on
        # the tick thread. So the GIL stays held here.
        self.flush()
        self.dirty = False
        self.flushes += 1
        return True


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
