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

import logging
import os
import threading

import pysyncobj.syncobj
from pysyncobj.journal import FileJournal, MemoryJournal, MetaStorer
from pysyncobj.pickle import dumps as pysyncobj_dumps

log = logging.getLogger(__name__)


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
    """FileJournal that refuses to compact past its own end.

    Seen once under a follower burst with compaction running: a snapshot install shrank the log
    while a local compaction was pending, then deleteEntriesTo(serializeID) cut past the end, the log
    became empty and every tick raised IndexError. Keeping the entries is harmless: the snapshot
    covers them and the next compaction removes them.
    """

    def __init__(self, journalFile, fullDumpFile=None):
        super().__init__(journalFile)
        self.full_dump_file = fullDumpFile
        self.compactions_refused = 0
        # Bytes of commands in the log (pysyncobj keeps them all in RAM too): the transport forces
        # a compaction when this passes LOG_COMPACTION_MAX_BYTES, since pysyncobj compacts by count.
        self.size_bytes = sum(len(entry[0]) for entry in self)

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
        super().deleteEntriesTo(entryTo)


class GroupCommitJournal(CompactionGuardedJournal):
    """Marks itself dirty on every change; flush_if_dirty() makes the changes durable (msync)."""

    def __init__(self, journalFile, fullDumpFile=None):
        super().__init__(journalFile, fullDumpFile)
        self._FileJournal__metaStorer = DurableMetaStorer(journalFile + ".meta")
        self.dirty = False
        self.flushes = 0

    def add(self, command, idx, term):
        super().add(command, idx, term)
        self.dirty = True

    def clear(self):
        # pysyncobj clears the journal in two places, both right after a snapshot file was renamed
        # into place without fsync: compaction (deleteEntriesTo, after the forked child wrote it)
        # and a snapshot installed from the leader (the received file). Make the snapshot durable
        # before the journal forgets what it covers.
        if self.full_dump_file and os.path.exists(self.full_dump_file):
            fsync_path(self.full_dump_file)
            fsync_directory_of(self.full_dump_file)
        super().clear()
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom):
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def flush_if_dirty(self) -> bool:
        if not self.dirty:
            return False
        self.flush()
        self.dirty = False
        self.flushes += 1
        return True


_JOURNAL_KINDS = {"group": GroupCommitJournal, "off": CompactionGuardedJournal}
_registry_lock = threading.Lock()
_registered: dict[str, tuple[type, str | None]] = {}  # journal path -> (class, full dump path)
_STOCK_CREATE_JOURNAL = pysyncobj.syncobj.createJournal


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
