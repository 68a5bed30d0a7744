"""Which journal class pysyncobj builds for a group's journal file.

pysyncobj creates its journal through the module global `pysyncobj.syncobj.createJournal`, with
only the file name; a group registers its file here with its fsync mode before it constructs its
SyncObj, so each group of a process gets its own kind of journal.
"""

from __future__ import annotations

import os
import threading

import pysyncobj.syncobj
from pysyncobj.journal import MemoryJournal

from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.startup_phases import log_phase, phase_clock

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
    started = phase_clock()
    journal = kind(journalFile, full_dump_file)
    log_phase("journal_open", started, entries=len(journal), file=journalFile)
    return journal


def install_journal_factory() -> None:
    pysyncobj.syncobj.createJournal = create_journal
