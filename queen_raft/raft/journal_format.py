"""The journal file's format, and the check of every record at load.

The file is pysyncobj's (FileJournal): a 40-byte header, APP_NAME (24 B) + APP_VERSION (8 B) +
format version (<I) + the offset where the records end (<I), then the records. The format version
tells the two record layouts apart:

- version 1 (pysyncobj's): <I size, <QQ idx term, command, <I size; size = 16 + len(command).
  Nothing in it notices a flipped byte inside the command.
- version 2 (ours, CHECKSUMMED_FORMAT): <I size, <I crc, <QQ idx term, command, <I size, with the
  same size, and crc = CRC-32 (zlib.crc32) of <IQQ size idx term followed by the command, so a
  flipped byte anywhere in the size, index, term or command fails the check.

A version-1 journal (written before checksums) loads, its records checked as far as version 1
allows (lengths, tails, consecutive indexes), and is then rewritten as version 2 through the
compaction's crash-safe rename (CompactionGuardedJournal.__init__). Nothing else reads our journals:
pysyncobj's FileJournal is replaced for every group.

CRC-32 rather than CRC-32C: zlib's is in the stdlib and runs in C; it detects every
burst of up to 32 flipped bits, and a random damage with probability 1 - 2^-32, which is what a
torn or rotten record needs; nothing here defends against a deliberate forgery (whoever can write
the data dir can write anything).

What a load accepts (scan_records): a header that is pysyncobj's with version 1 or 2; records that
end exactly at the header's end offset, each one whole (its size inside the file, its tail equal to
its head), checksummed (version 2), with indexes that follow each other and terms that never go
down. Anything else is damage (DamagedDataError: the node refuses to start, exit 65), except a torn
tail: see scan_records.
"""

from __future__ import annotations

import logging
import struct
import zlib
from dataclasses import dataclass, field
from array import array

from pysyncobj.journal import (
    APP_NAME,
    APP_VERSION,
    FIRST_RECORD_OFFSET,
    LAST_RECORD_OFFSET_OFFSET,
    NAME_SIZE,
    VERSION_SIZE,
)
from pysyncobj.pickle import to_bytes

from queen_raft.raft.damaged import DamagedDataError

log = logging.getLogger(__name__)

STOCK_FORMAT = 1
CHECKSUMMED_FORMAT = 2
FORMAT_VERSION_OFFSET = NAME_SIZE + VERSION_SIZE

# Version 2: <I size, <I crc, <QQ idx term (the head), command, <I size (the tail).
RECORD_HEAD = struct.Struct("<IIQQ")
SIZE_INDEX_TERM = struct.Struct("<IQQ")
RECORD_TAIL = struct.Struct("<I")
RECORD_TAIL_BYTES = RECORD_TAIL.size
RECORD_OVERHEAD_BYTES = RECORD_HEAD.size + RECORD_TAIL_BYTES
# Version 1: <I size, <QQ idx term, command, <I size.
STOCK_RECORD_HEAD = struct.Struct("<IQQ")
# size counts the index, the term and the command.
INDEX_TERM_BYTES = 16
# The unit a disk writes whole or not at all: an unwritten one reads as zeros in a preallocated file.
SECTOR_BYTES = 512
# No Raft index or term of ours comes near this; a record claiming more is damage, not a big log.
MAX_INDEX_OR_TERM = 2**62


def journal_header(version: int = CHECKSUMMED_FORMAT) -> bytes:
    app_name = APP_NAME + b"\0" * (NAME_SIZE - len(APP_NAME))
    app_version = APP_VERSION + b"\0" * (VERSION_SIZE - len(APP_VERSION))
    return app_name + app_version + struct.pack("<II", version, FIRST_RECORD_OFFSET)


def record_crc(size: int, idx: int, term: int, command) -> int:
    return zlib.crc32(command, zlib.crc32(SIZE_INDEX_TERM.pack(size, idx, term)))


def encode_journal_record(command, idx: int, term: int) -> bytes:
    """One version-2 record: <I size, <I crc, <QQ idx term, command, <I size."""
    command = to_bytes(command)
    size = len(command) + INDEX_TERM_BYTES
    tail = RECORD_TAIL.pack(size)
    return b"".join((RECORD_HEAD.pack(size, record_crc(size, idx, term, command), idx, term), command, tail))


def record_problem(head: bytes, command: bytes, idx: int, term: int) -> str | None:
    """Why a version-2 record (its head bytes and command) is not the entry the index says, or None."""
    size, crc, head_idx, head_term = RECORD_HEAD.unpack(head)
    if (head_idx, head_term) != (idx, term) or size != len(command) + INDEX_TERM_BYTES:
        return f"record header (size {size}, index {head_idx}, term {head_term}) differs from the one loaded"
    if record_crc(size, idx, term, command) != crc:
        return "record checksum mismatch"
    return None


@dataclass
class ScannedJournal:
    version: int
    end: int  # where the records end: the next record goes here
    offsets: array = field(default_factory=lambda: array("Q"))
    indexes: array = field(default_factory=lambda: array("Q"))
    terms: array = field(default_factory=lambda: array("Q"))
    torn_bytes: int = 0  # a torn tail dropped at load (see scan_records)


def read_header(mapped, length: int, path: str) -> tuple[int, int]:
    """(format version, end offset of the records) from a journal's header; DamagedDataError else."""
    if length < FIRST_RECORD_OFFSET:
        raise DamagedDataError(path, 0, f"the journal is {length} bytes, shorter than its {FIRST_RECORD_OFFSET}-byte header")
    if bytes(mapped[0:len(APP_NAME)]) != APP_NAME:
        raise DamagedDataError(path, 0, "the header does not start with PYSYNCOBJ: not a journal, or overwritten")
    version, end = struct.unpack_from("<II", mapped, FORMAT_VERSION_OFFSET)
    if version not in (STOCK_FORMAT, CHECKSUMMED_FORMAT):
        raise DamagedDataError(path, FORMAT_VERSION_OFFSET, f"unknown journal format version {version}")
    if not FIRST_RECORD_OFFSET <= end <= length:
        raise DamagedDataError(path, LAST_RECORD_OFFSET_OFFSET,
                               f"the header says the records end at byte {end}, but the file has {length} bytes "
                               "(truncated, or a damaged header)")
    return version, end


def _next_record(mapped, offset: int, end: int, version: int, previous: tuple[int, int] | None):
    """(idx, term, offset of the next record), or a string saying what is wrong with this one."""
    head = RECORD_HEAD if version == CHECKSUMMED_FORMAT else STOCK_RECORD_HEAD
    if offset + head.size + RECORD_TAIL_BYTES > end:
        return f"a record header at {offset} runs past the end of the records ({end})"
    if version == CHECKSUMMED_FORMAT:
        size, crc, idx, term = head.unpack_from(mapped, offset)
    else:
        (size, idx, term), crc = head.unpack_from(mapped, offset), None
    record_end = offset + size + head.size - INDEX_TERM_BYTES + RECORD_TAIL_BYTES
    if size < INDEX_TERM_BYTES or record_end > end:
        return f"record length {size} does not fit in the journal (records end at {end})"
    if RECORD_TAIL.unpack_from(mapped, record_end - RECORD_TAIL_BYTES)[0] != size:
        return f"record length {size} differs from its trailing copy"
    if crc is not None and record_crc(size, idx, term, mapped[offset + head.size : record_end - RECORD_TAIL_BYTES]) != crc:
        return "record checksum mismatch (a flipped byte in its length, index, term or command)"
    if not (1 <= idx <= MAX_INDEX_OR_TERM and term <= MAX_INDEX_OR_TERM):
        return f"implausible index {idx} or term {term}"
    if previous is not None and (idx != previous[0] + 1 or term < previous[1]):
        return f"index {idx} term {term} does not follow index {previous[0]} term {previous[1]}"
    return idx, term, record_end


def _unwritten_sector(mapped, offset: int, end: int, length: int) -> int | None:
    """Where the record at `offset` meets a sector that was never written, or None: a
    SECTOR_BYTES-aligned sector whose part from the record's start (or the sector's) to the sector's
    end (or the file's) reads all zeros, at least a record head long (a few zero bytes in a record
    prove nothing). The record's extent is what its head claims when that fits before `end`, else
    everything to `end`."""
    size = RECORD_HEAD.unpack_from(mapped, offset)[0] if offset + RECORD_HEAD.size <= end else 0
    claimed = offset + RECORD_HEAD.size + size - INDEX_TERM_BYTES + RECORD_TAIL_BYTES
    stop = claimed if INDEX_TERM_BYTES <= size and claimed <= end else end
    for sector in range(offset - offset % SECTOR_BYTES, stop, SECTOR_BYTES):
        start, finish = max(sector, offset), min(sector + SECTOR_BYTES, length)
        if finish - start >= RECORD_HEAD.size and not bytes(mapped[start:finish]).strip(b"\0"):
            return start
    return None


def scan_records(mapped, length: int, path: str) -> ScannedJournal:
    """Check and index every record of a journal mapped in `mapped` (`length` bytes).

    A torn tail is dropped, with a warning, instead of refused. What a power loss leaves of records
    appended after the last flush: the header's page reached the disk (its end offset covers them)
    and some sectors of theirs did not. The file grows into preallocated (zeroed) space, so an
    unwritten sector reads as zeros. Two shapes are torn tails:

    - the bytes from some record to the header's end offset are all zero;
    - a record fails its check and its part of one of the SECTOR_BYTES-aligned sectors it overlaps
      reads all zeros (its first sector: from the record's start on).
      It and every record after it are dropped: appends go in file order and a flush covers all
      that was written before it, so a record written after one that never reached the disk was
      never flushed either, even if all of it did reach the disk.

    In fsync="group" mode no such record was acknowledged: a follower's acknowledgement and the
    leader's count of itself both wait for the fdatasync that writes the records and the header
    together, and after it every sector of the records holds what was written. In "off" mode a power
    loss may lose acknowledged writes anyway (README, durability). Any other damage, even in the last
    record, is refused: a checksum mismatch or a wrong length in a flushed record, with no sector
    unwritten, may hide an acknowledged entry.
    """
    version, end = read_header(mapped, length, path)
    scanned = ScannedJournal(version=version, end=end)
    offset, previous = FIRST_RECORD_OFFSET, None
    while offset < end:
        found = _next_record(mapped, offset, end, version, previous)
        if isinstance(found, str):
            if not bytes(mapped[offset:end]).strip(b"\0"):
                why = f"{end - offset} zero bytes"
            elif (sector := _unwritten_sector(mapped, offset, end, length)) is not None:
                why = f"{end - offset} bytes whose first record ({found}) has an unwritten (zero) sector at {sector}"
            else:
                raise DamagedDataError(path, offset, found)
            scanned.torn_bytes = end - offset
            scanned.end = offset
            log.warning("journal %s: dropped a torn tail at offset %d: %s (written after the last flush, "
                        "never acknowledged)", path, offset, why)
            return scanned
        idx, term, next_offset = found
        scanned.offsets.append(offset)
        scanned.indexes.append(idx)
        scanned.terms.append(term)
        previous, offset = (idx, term), next_offset
    return scanned
