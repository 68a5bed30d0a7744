"""A journal on a full disk: records wait in memory, unflushed, until the file can grow again.

Appends cannot simply fail: a follower must go on appending what the leader sends so that it keeps
applying what the others commit (its reads go on), and pysyncobj has no way to take an append back.
So a record the file cannot take (PreallocatedFile raised ENOSPC, EDQUOT or EIO while growing, or
EROFS, EACCES or EPERM: a data dir that takes no writes) waits in `_spill`, and so do all after it,
in order; the header's end offset never covers them. Nothing in the spill is flushed, so in
fsync="group" mode nothing in it is acknowledged: the journal stays dirty and the transport holds
this node's acknowledgements, and a leader steps down (transport.GroupTransport). Every flush
(each tick) and every second the spill is retried; once it is in the file and flushed, the held
acknowledgements go and the node takes writes again. Past SPILL_MAX_BYTES an append is refused
(SpillFull), which the follower's append takes as a refusal of the leader's entries.

The error is logged when it starts, then at most every DISK_ERROR_LOG_INTERVAL_S, and once when the
disk takes writes again; an append refused for the cap once an episode.
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

from queen_raft.raft.journal_storage import is_disk_write_error

log = logging.getLogger(__name__)

# Records that could not go to a full disk wait in memory up to this; past it an append is refused
# (a follower then stops taking entries until space returns; the leader re-sends them later).
SPILL_MAX_BYTES = 64 * 1024 * 1024
# A write error that repeats (every append and flush retries) is logged at most this often.
DISK_ERROR_LOG_INTERVAL_S = 60.0


class SpillFull(OSError):
    """An append refused: the disk is full and SPILL_MAX_BYTES already wait in memory. The follower's
    append (follower_append.py) takes it as a refusal of the leader's entries, already logged."""


class SpillOnFullDisk:
    """The disk-full half of CompactionGuardedJournal (it sets _spill, _spill_from, disk_error)."""

    _spill_cap_reached = False  # an append was refused for the cap since the spill last emptied

    # Compactions refused for lack of room since the last one that went through, and who hears of
    # each refusal (construction.py: the snapshot writer, which then pauses as after a failed writer:
    # pysyncobj's log stays over its threshold, and it would start a writer per entry applied).
    compactions_refused_in_a_row = 0
    on_compaction_refused: Callable[[int], None] | None = None

    def _compaction_did_not_fit(self, exc: OSError) -> None:
        self.compactions_refused += 1
        self.compactions_refused_in_a_row += 1
        log.warning("journal %s: compaction refused, its new file does not fit (%s)", self.journal_path, exc)
        if self.on_compaction_refused is not None:
            self.on_compaction_refused(self.compactions_refused_in_a_row)

    def _write_or_spill(self, offset: int, record: bytes) -> None:
        """Write the record at `offset`, or keep it in the spill when the disk cannot take it."""
        if self._spill_from is None:
            try:
                self._FileJournal__journalFile.write(offset, record)
                return
            except OSError as exc:
                if not is_disk_write_error(exc):
                    raise
                self._disk_write_failed(exc)
                self._spill_from = offset
        if len(self._spill) + len(record) > SPILL_MAX_BYTES:
            if not self._spill_cap_reached:  # once an episode: the leader re-sends at every heartbeat
                self._spill_cap_reached = True
                log.error("journal %s: disk full and %d bytes waiting in memory: this node takes no more entries "
                          "from the leader until the disk takes writes again", self.journal_path, len(self._spill))
            raise SpillFull(errno.ENOSPC, f"journal {self.journal_path}: disk full and {SPILL_MAX_BYTES} bytes waiting")
        self._spill += record

    def _truncate_spill(self, end: int) -> bool:
        """Cut the log at `end`; True when that cut fell inside the spill (the file is untouched)."""
        if self._spill_from is not None and end > self._spill_from:
            del self._spill[end - self._spill_from:]
            return True
        self._spill_from, self._spill, self._spill_cap_reached = None, bytearray(), False
        return False

    @property
    def disk_full(self) -> bool:
        """Records wait in memory for the disk: take no writes, acknowledge nothing new."""
        return self._spill_from is not None

    def _disk_write_failed(self, exc: OSError, consequence: str = "this node takes no writes and acknowledges "
                           "nothing new until the disk takes them again; reads go on") -> None:
        """Log a write error when it starts, then at most once per DISK_ERROR_LOG_INTERVAL_S (every
        append, flush and second retries it)."""
        first = self.disk_error is None
        self.disk_error = exc
        now = time.monotonic()
        if first or now - self._disk_error_logged_at >= DISK_ERROR_LOG_INTERVAL_S:
            self._disk_error_logged_at = now
            log.error("journal %s: cannot write (%s): %s", self.journal_path, exc, consequence)

    def _disk_write_recovered(self) -> None:
        self._spill_cap_reached = False
        if self.disk_error is not None:
            log.warning("journal %s: writable again; taking writes", self.journal_path)
        self.disk_error = None

    def write_spilled_records(self) -> bool:
        """Move the records waiting in memory to the file, if it can grow now; True when none wait."""
        if self._spill_from is None:
            return True
        try:
            self._FileJournal__journalFile.write(self._spill_from, self._spill)
        except OSError as exc:
            if not is_disk_write_error(exc):
                raise
            self._disk_write_failed(exc)
            return False
        self._spill_from = None
        self._spill = bytearray()
        self._FileJournal__setLastRecordOffset(self._FileJournal__currentOffset)
        self._disk_write_recovered()
        return True

    def onOneSecondTimer(self):
        # pysyncobj saves the commit index here; a full disk must not end the tick. It retries next
        # second (it keeps the meta unsaved), and the commit index only says where a restart starts
        # applying from, so writes go on meanwhile.
        if not self.write_spilled_records():
            return
        try:
            super().onOneSecondTimer()
        except OSError as exc:
            if not is_disk_write_error(exc):
                raise
            self._disk_write_failed(exc, "the commit index is saved again once it can be; writes go on")
            return
        self._disk_write_recovered()
