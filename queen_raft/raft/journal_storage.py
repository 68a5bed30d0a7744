"""The journal's file on disk: a mapping that grows only into space the filesystem has reserved,
and the `.meta` file (term, vote, commit index), checked when read and fsynced when written.

Full disks. The journal is written through an mmap. A store into a page of a shared file mapping that
the filesystem cannot back (a full disk, a full tmpfs; the file grown by ftruncate, as pysyncobj's
ResizableFile does, is sparse) kills the process with SIGBUS: nothing logged, nothing answered.
PreallocatedFile reserves every byte before the mapping reaches it (posix_fallocate), so a full disk
is an OSError (ENOSPC) when the journal tries to grow, raised before anything is written, which the
journal turns into "disk full" (journal.py) instead of a crash.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
from array import array

from pysyncobj.pickle import loads as pysyncobj_loads
from pysyncobj.journal import FIRST_RECORD_OFFSET, LAST_RECORD_OFFSET_OFFSET, MetaStorer

from queen_raft.raft.damaged import DamagedDataError
from queen_raft.raft.journal_format import encode_journal_record, journal_header

log = logging.getLogger(__name__)

# Errors of a write that say the disk cannot take it now (full, over quota), failed it (EIO), or
# the data dir is not writable (a filesystem remounted read-only after errors, permissions taken
# away): the node stops accepting writes instead of raising out of every tick, and goes on when a
# write succeeds again.
DISK_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM})
# A filesystem without fallocate: growth falls back to ftruncate, as pysyncobj's ResizableFile.
NO_FALLOCATE_ERRNOS = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})

# Kept reserved next to .meta so that a full disk can still store a new term (CheckedMetaStorer).
META_RESERVE_SUFFIX = ".reserve"
META_RESERVE_BYTES = 64 * 1024

INITIAL_SIZE_BYTES = 1024
ZERO_CHUNK_BYTES = 1024 * 1024
GROWTH_FACTOR = 2.0
# When doubling does not fit, the file grows by what the write needs, rounded up to this.
GROWTH_MIN_BYTES = 64 * 1024


def is_disk_write_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_WRITE_ERRNOS


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class PreallocatedFile:
    """pysyncobj's ResizableFile interface (write, read, flush, _destroy) over a file whose mapped
    bytes are all reserved on disk: `capacity` bytes from 0 are; a write beyond grows the file with
    posix_fallocate first, and raises its OSError (nothing written) when the disk is full."""

    def __init__(self, path: str, default_content: bytes) -> None:
        """Maps the file as it is (created with default_content when missing); reserve_all() next."""
        self.path = path
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(default_content)
        self.file = open(path, "r+b")
        if os.fstat(self.file.fileno()).st_size == 0:
            self.file.close()
            raise DamagedDataError(path, 0, "the journal is empty (0 bytes): no header")
        self.mm = mmap.mmap(self.file.fileno(), 0)
        self.capacity = 0  # bytes from 0 known to be reserved on disk

    def reserve_all(self, backed_through: int) -> None:
        """Reserve the whole file (at least INITIAL_SIZE_BYTES). A file pysyncobj grew is sparse past
        its records; when the disk cannot back it, only the first `backed_through` bytes (written
        ones) count as reserved, and appends beyond wait for space."""
        try:
            self._reserve(0, max(len(self.mm), INITIAL_SIZE_BYTES))
        except OSError as exc:
            if not is_disk_write_error(exc):
                raise
            self.capacity = min(len(self.mm), backed_through)
            log.error("journal %s: cannot reserve its %d bytes on disk (%s); appends wait for space",
                      self.path, len(self.mm), exc)

    def _reserve(self, start: int, end: int) -> None:
        try:
            os.posix_fallocate(self.file.fileno(), start, end - start)
        except OSError as exc:
            if exc.errno not in NO_FALLOCATE_ERRNOS:
                raise
        if end > len(self.mm):
            self._remap(end)
        self.capacity = max(self.capacity, end)

    def _remap(self, size: int) -> None:
        try:
            self.mm.resize(size)
        except (SystemError, OSError):
            self.mm.close()
            os.ftruncate(self.file.fileno(), size)
            self.mm = mmap.mmap(self.file.fileno(), 0)

    def ensure_capacity(self, end: int) -> None:
        """Reserve the file up to `end` (doubling it when that fits); OSError when the disk is full."""
        if end <= self.capacity:
            return
        doubled = max(end, int(len(self.mm) * GROWTH_FACTOR)) if end > len(self.mm) else len(self.mm)
        try:
            self._reserve(self.capacity, doubled)
        except OSError as exc:
            if not is_disk_write_error(exc) or doubled <= _round_up(end, GROWTH_MIN_BYTES):
                raise
            self._reserve(self.capacity, _round_up(end, GROWTH_MIN_BYTES))

    def write(self, offset: int, values) -> None:
        self.ensure_capacity(offset + len(values))
        self.mm[offset:offset + len(values)] = values

    def read(self, offset: int, size: int) -> bytes:
        return self.mm[offset:offset + size]

    def zero(self, start: int, stop: int) -> None:
        """Overwrite [start, stop) of the file (as far as it is mapped) with zeros, a MiB at a time."""
        stop = min(stop, len(self.mm))
        for at in range(start, stop, ZERO_CHUNK_BYTES):
            end = min(at + ZERO_CHUNK_BYTES, stop)
            self.mm[at:end] = bytes(end - at)

    def flush(self) -> None:
        self.mm.flush()

    def _destroy(self) -> None:
        try:
            self.mm.flush()
        finally:
            self.mm.close()
            self.file.close()


def _check_meta(meta, path: str) -> dict:
    if not isinstance(meta, dict):
        raise DamagedDataError(path, 0, f"holds a {type(meta).__name__}, not the node's term, vote and commit index")
    term = meta.get("currentTerm", 0)
    commit = meta.get("raftCommitIndex", 1)
    vote = meta.get("votedForNodeId")
    if not (isinstance(term, int) and 0 <= term <= 2**62) or not (isinstance(commit, int) and 0 <= commit <= 2**62):
        raise DamagedDataError(path, 0, f"implausible term {term!r} or commit index {commit!r}")
    if vote is not None and not isinstance(vote, str):
        raise DamagedDataError(path, 0, f"implausible vote {vote!r}")
    return meta


def load_meta(path: str) -> dict:
    """Term, vote and commit index as stored; {} for a node that never stored them (no file).

    Empty, unreadable or not a dict of the expected fields is damage: starting from term 0 with no
    vote could cast a second vote in a term this node already voted in (two leaders in one term).
    Both writers (pysyncobj's and DurableMetaStorer) write a tmp file and rename it over this one,
    so a crash leaves the old file or the new one, never a part.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    if not data:
        raise DamagedDataError(path, 0, "the file is empty (term and vote lost)")
    try:
        meta = pysyncobj_loads(data)
    except Exception as exc:  # any unpickling failure: what it is says nothing more useful than "garbage"
        raise DamagedDataError(path, 0, f"cannot be read ({type(exc).__name__}: {exc})") from None
    return _check_meta(meta, path)


class CheckedMetaStorer(MetaStorer):
    """pysyncobj's MetaStorer whose getMeta refuses a damaged file instead of starting from {}, and
    whose storeMeta still works once on a full disk.

    A node on a full disk must still store a new term to follow a new leader (pysyncobj stores it
    before it accepts the leader's messages), or it could neither apply nor serve reads. So a file of
    META_RESERVE_BYTES is kept reserved next to the meta (`.meta.reserve`); when a store fails for
    lack of space, the reserve is deleted and the store tried again, and the reserve is made again
    after a store once space allows. Without it, a failed store raises, and the term or vote is not
    taken (stored_term.py; retried on the next message).

    A store of exactly what this storer last wrote whole is left out: a follower marks its commit
    index unsaved on every AppendEntries, heartbeats included, so pysyncobj's one-second save would
    rewrite (here: fsync, rename, fsync the directory) the same bytes every second in every group.
    """

    _stored: dict | None = None  # a copy of the meta the last successful store wrote
    _reserve_released = False  # the reserve was spent on a full disk and is not back yet

    def getMeta(self):
        return load_meta(self.getPath())

    def storeMeta(self, meta):
        if meta == self._stored:
            if self._reserve_released:
                self._keep_reserve()  # as after a store: made again once space allows
            return
        self._stored = None  # a write that fails part-way leaves the file unknown
        try:
            self._write(meta)
        except OSError as exc:
            if not is_disk_write_error(exc) or not self._release_reserve():
                raise
            log.warning("%s: disk full (%s); stored term and vote in the space kept for them", self.getPath(), exc)
            self._write(meta)
        else:
            self._keep_reserve()
        self._stored = dict(meta)

    def _write(self, meta) -> None:
        MetaStorer.storeMeta(self, meta)

    def _release_reserve(self) -> bool:
        try:
            os.remove(self.getPath() + META_RESERVE_SUFFIX)
        except OSError:  # none left, or the dir takes no change at all (read-only)
            return False
        self._reserve_released = True
        return True

    def _keep_reserve(self) -> None:
        path = self.getPath() + META_RESERVE_SUFFIX
        if os.path.exists(path):
            self._reserve_released = False
            return
        fd = os.open(path + ".tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, META_RESERVE_BYTES)
        except OSError:
            os.close(fd)
            os.remove(path + ".tmp")  # no space yet: try again after the next store
            return
        os.close(fd)
        os.replace(path + ".tmp", path)
        self._reserve_released = False


def write_journal_file(path: str, kept, durable: bool):
    """A new journal at `path` holding exactly `kept` ((command, idx, term), read one at a time):
    (file, offsets, indexes, terms, end offset). Raises OSError (the file closed) on a full disk."""
    new_file = PreallocatedFile(path, journal_header())
    try:
        new_file.reserve_all(backed_through=0)
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
        if durable:
            new_file.flush()
    except BaseException:
        new_file._destroy()
        raise
    return new_file, offsets, indexes, terms, offset
