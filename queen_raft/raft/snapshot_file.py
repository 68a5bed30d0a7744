"""The snapshot file on disk: a checksummed header, then pysyncobj's dump tuple.

Layout of `raft.snapshot`:

    magic     8 bytes   b"QRSNAP01"
    length    8 bytes   payload bytes, uint64 little-endian
    sha256   32 bytes   of the payload
    payload             pickle (protocol 4) of pysyncobj's dump tuple (data, last entry, previous
                        entry, cluster); `data` carries the state's own snapshot, as the list of
                        its chunks (or, in files written before, and by `cluster restore`, its bytes)

Every read verifies the length and the digest before it unpickles anything, so a truncated file, a
flipped byte or a file cut by a full disk is found at once, with the file named, instead of
loading as an empty state. The payload is not compressed: the state's bytes in it are already
zstd-compressed (state.snapshot()), and pysyncobj's gzip level 9 over them cost time for nothing.

Files written before this format (pysyncobj's gzip of the same pickle) still load: gzip's own
CRC-32 and length trailer are checked when the stream is read to its end, so a damaged old file is
refused the same way. A cluster being upgraded node by node must not send a new-format snapshot
to a node that still runs the old code: upgrade every node before the next snapshot transfer
(any node restarted on new code writes the new format at its next compaction).

A node that finds its data unusable raises DataDirRefused; the node process turns it into exit
code 65 (EX_DATAERR) with its message, which names the file, what is wrong and the recovery step.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import pickle
import struct
import zlib
from typing import IO, Any

import pysyncobj.pickle

from queen_raft.raft.damaged import EXIT_DAMAGED_DATA, RECOVERY_STEP, DamagedDataError

MAGIC = b"QRSNAP01"
HEADER = struct.Struct("<8sQ32s")
GZIP_MAGIC = b"\x1f\x8b"
PICKLE_PROTOCOL = 4
READ_CHUNK_BYTES = 1 << 20

# sysexits' EX_DATAERR: this node's data is wrong; the fix is to replace it, not to retry.
EXIT_DATA_REFUSED = EXIT_DAMAGED_DATA


class SnapshotDamaged(Exception):
    """The snapshot file cannot be trusted: truncated, corrupted, or not a snapshot at all."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class DataDirRefused(DamagedDataError):
    """This node's Raft data cannot be loaded without losing committed entries: refuse to start.

    Going on would mean an empty or truncated state that votes, leads and serves reads while the
    entries it lost are committed; the other nodes hold them, so the safe repair is a re-sync.
    """

    exit_code = EXIT_DATA_REFUSED

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        self.file, self.offset, self.detail = path, None, problem
        data_dir = os.path.dirname(os.path.abspath(path))
        Exception.__init__(self, f"refusing to start: {path}: {problem}. Recovery: {RECOVERY_STEP} ({data_dir})")


# A writer flushes what it wrote to the disk every this many bytes, not all at its end: the kernel
# keeps a slow writer's pages dirty until its fsync, and one fsync of a ten-million-timer snapshot
# (about 200 MB) queues that much writeback ahead of every journal flush on the disk (the journal's
# fdatasync stalls up to 140 ms; bench/README.md). As Redis's rdb-save-incremental-fsync does.
SYNC_EVERY_BYTES = 8 << 20


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it, and flushes it to
    the disk every `sync_every` bytes."""

    def __init__(self, file: IO[bytes], sync_every: int = SYNC_EVERY_BYTES) -> None:
        self._file = file
        self._sync_every = sync_every
        self._unsynced = 0
        self.digest = hashlib.sha256()
        self.length = 0
        self.syncs = 0

    def write(self, data) -> int:
        self._file.write(data)
        self.digest.update(data)
        size = len(data)
        self.length += size
        self._unsynced += size
        if self._unsynced >= self._sync_every:
            self._file.flush()
            os.fdatasync(self._file.fileno())
            self._unsynced = 0
            self.syncs += 1
        return size


def write_snapshot(path: str, dump: tuple, sync_every: int = SYNC_EVERY_BYTES) -> int:
    """Write dump to path (a new file), then flush and fsync it. The caller renames it into place.
    Returns how many times it flushed to the disk on the way (every `sync_every` bytes)."""
    with open(path, "wb") as file:
        file.write(HEADER.pack(MAGIC, 0, b"\0" * 32))
        writer = _HashingWriter(file, sync_every)
        # Streamed: the state's chunks are pickled straight into the file as they are encoded.
        _pickler(writer).dump(dump)
        file.seek(0)
        file.write(HEADER.pack(MAGIC, writer.length, writer.digest.digest()))
        file.flush()
        os.fsync(file.fileno())
    return writer.syncs


def _pickler(output) -> pickle.Pickler:
    """A pickler without a memo: the memo would keep every chunk of the state alive until the end
    of the dump (the whole snapshot in RAM). A dump holds no object twice and no cycle."""
    pickler = pickle.Pickler(output, protocol=PICKLE_PROTOCOL)
    pickler.fast = True
    return pickler


def encode_snapshot(dump: tuple) -> bytes:
    """The bytes write_snapshot writes (tests and tools)."""
    output = io.BytesIO()
    _pickler(output).dump(dump)
    payload = output.getvalue()
    return HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def _check_header(path: str, head: bytes) -> tuple[int, bytes]:
    if len(head) < HEADER.size:
        raise SnapshotDamaged(path, f"truncated header ({len(head)} of {HEADER.size} bytes)")
    _, length, digest = HEADER.unpack(head)
    return length, digest


def verify_snapshot_stream(file: IO[bytes], path: str) -> None:
    """Read file from its start to its end and check it (SnapshotDamaged if damaged); no unpickling."""
    head = file.read(HEADER.size)
    if head.startswith(MAGIC):
        length, digest = _check_header(path, head)
        hashed, seen = hashlib.sha256(), 0
        while chunk := file.read(READ_CHUNK_BYTES):
            hashed.update(chunk)
            seen += len(chunk)
        _check_payload(path, length, digest, seen, hashed.digest())
        return
    if head.startswith(GZIP_MAGIC):
        file.seek(0)
        try:
            with gzip.GzipFile(fileobj=file, mode="rb") as unzipped:
                while unzipped.read(READ_CHUNK_BYTES):
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            raise SnapshotDamaged(path, f"damaged gzip snapshot ({type(exc).__name__}: {exc})") from None
        return
    raise SnapshotDamaged(path, "not a snapshot (unknown header)" if head else "empty file")


def _check_payload(path: str, length: int, digest: bytes, seen: int, actual: bytes) -> None:
    if seen != length:
        raise SnapshotDamaged(path, f"payload is {seen} bytes, the header says {length} (truncated or extended)")
    if actual != digest:
        raise SnapshotDamaged(path, "payload checksum mismatch (sha256): the file is corrupted")


class PayloadCheck:
    """Checks a new-format file read front to back in chunks (header included), as it is sent:
    the sender reads it once, not once to verify and once to send."""

    def __init__(self, path: str, head: bytes) -> None:
        self.path = path
        self._length, self._digest = _check_header(path, head)
        self._hash = hashlib.sha256()
        self._offset = 0

    def update(self, chunk: bytes) -> None:
        skip = max(0, HEADER.size - self._offset)
        if skip < len(chunk):
            self._hash.update(memoryview(chunk)[skip:])
        self._offset += len(chunk)

    def finish(self) -> None:
        """SnapshotDamaged unless the whole file was seen and matches its header."""
        _check_payload(self.path, self._length, self._digest, max(0, self._offset - HEADER.size), self._hash.digest())


def verify_snapshot_file(path: str) -> None:
    with open(path, "rb") as file:
        verify_snapshot_stream(file, path)


def read_snapshot(path: str) -> tuple:
    """The dump tuple (data, last, prev, cluster) of the file at path, verified; SnapshotDamaged
    when it is damaged, OSError when it cannot be opened."""
    with open(path, "rb") as file:
        head = file.read(HEADER.size)
        if head.startswith(MAGIC):
            file.seek(0)
            verify_snapshot_stream(file, path)
            # Verified first, then unpickled from the same open file: one copy of the state in RAM.
            file.seek(HEADER.size)
            return _checked_dump(path, _unpickle(path, lambda: pickle.load(file)))
        if head.startswith(GZIP_MAGIC):
            file.seek(0)
            return _checked_dump(path, _unpickle(path, lambda: _load_gzip(file)))
    raise SnapshotDamaged(path, "not a snapshot (unknown header)" if head else "empty file")


def _load_gzip(file: IO[bytes]) -> Any:
    with gzip.GzipFile(fileobj=file, mode="rb") as unzipped:
        dump = pysyncobj.pickle.load(unzipped)
        if unzipped.read(1):  # pickle stops at its STOP opcode: read on so the CRC trailer is checked
            raise ValueError("bytes after the pickled dump")
    return dump


def _unpickle(path: str, load) -> Any:
    try:
        return load()
    except (OSError, EOFError, zlib.error, pickle.UnpicklingError, ValueError, TypeError,
            AttributeError, ImportError, IndexError, KeyError, struct.error, io.UnsupportedOperation) as exc:
        raise SnapshotDamaged(path, f"cannot decode the snapshot ({type(exc).__name__}: {exc})") from None


def _checked_dump(path: str, dump: Any) -> tuple:
    if not (isinstance(dump, tuple) and len(dump) == 4 and _is_entry(dump[1]) and _is_entry(dump[2])):
        raise SnapshotDamaged(path, "decodes, but not to a snapshot of this service")
    return dump


def _is_entry(entry: Any) -> bool:
    return (isinstance(entry, (tuple, list)) and len(entry) == 3 and isinstance(entry[0], bytes)
            and isinstance(entry[1], int) and isinstance(entry[2], int))


def remove_quietly(path: str | None) -> None:
    """Remove a tmp file if there is one."""
    if path:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
