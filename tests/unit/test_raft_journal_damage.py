"""A damaged journal or .meta is refused with the file, the offset and the recovery step; a torn tail
that no flush ever covered is dropped; every record read back is checked against its checksum."""

from __future__ import annotations

import os
import struct

import pytest
from pysyncobj.journal import FIRST_RECORD_OFFSET, LAST_RECORD_OFFSET_OFFSET, FileJournal
from pysyncobj.pickle import dumps as pysyncobj_dumps

from queen_raft.raft import damaged
from queen_raft.raft.damaged import EXIT_DAMAGED_DATA, DamagedDataError, exit_code_for
from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_format import RECORD_HEAD

ENTRIES = [(b"\x00" + bytes([i]) * (20 + i), i, 1 + i // 3) for i in range(1, 9)]


def write_journal(path: str, entries=ENTRIES, kind=GroupCommitJournal) -> list[int]:
    """The journal with `entries`, closed; each record's offset."""
    journal = kind(path, None)
    for entry in entries:
        journal.add(*entry)
    offsets = list(journal._offsets)
    if isinstance(journal, GroupCommitJournal):
        assert journal.flush_if_dirty()
    journal._destroy()
    return offsets


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def assert_refused(path: str, offset: int, *words: str, kind=CompactionGuardedJournal) -> DamagedDataError:
    with pytest.raises(DamagedDataError) as caught:
        kind(path.removesuffix(".meta"), None)
    error = caught.value
    assert error.file == path and error.offset == offset, (error.file, error.offset, str(error))
    text = str(error)
    assert path in text and f"offset {offset}" in text and "wipe this node's data dir" in text
    for word in words:
        assert word in text, text
    assert exit_code_for(error) == EXIT_DAMAGED_DATA == 65
    return error


def end_offset(path: str) -> int:
    with open(path, "rb") as f:
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        return struct.unpack("<I", f.read(4))[0]


# -- a flipped byte ------------------------------------------------------------------------------------

def test_a_flipped_byte_inside_a_command_is_refused_at_load_with_the_record_offset(tmp_path):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    flip_byte(path, offsets[4] + RECORD_HEAD.size + 3)  # inside entry 5's command
    assert_refused(path, offsets[4], "checksum")


@pytest.mark.parametrize("field_offset", [4, 8, 16])  # the crc, the index, the term
def test_a_flipped_byte_in_a_record_header_is_refused(tmp_path, field_offset):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    flip_byte(path, offsets[2] + field_offset)
    assert_refused(path, offsets[2])


def test_a_flipped_byte_is_caught_when_the_entry_is_read_back_to_apply_or_send(tmp_path):
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    for entry in ENTRIES:
        journal.add(*entry)
    assert journal[3] == ENTRIES[3]
    reported = []
    damaged.on_runtime_damage(reported.append)
    try:
        journal._mmap()[journal._offsets[3] + RECORD_HEAD.size + 1] ^= 0x01  # the disk's page changed under us
        with pytest.raises(DamagedDataError) as caught:
            journal[3]
        with pytest.raises(DamagedDataError):
            list(journal[2:5])  # what pysyncobj slices to send or apply
    finally:
        damaged.remove_runtime_damage_listener(reported.append)
    assert caught.value.offset == journal._offsets[3] and "entry 4" in str(caught.value)
    assert reported and reported[0].file == path
    assert journal[2] == ENTRIES[2]  # the records around it are fine
    journal._destroy()


# -- a truncated journal, a damaged length -------------------------------------------------------------

def test_a_journal_cut_short_of_its_records_is_refused(tmp_path):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    os.truncate(path, offsets[5] + 7)
    assert_refused(path, LAST_RECORD_OFFSET_OFFSET, "truncated")


def test_a_journal_cut_inside_its_header_is_refused(tmp_path):
    path = str(tmp_path / "raft.journal")
    write_journal(path)
    os.truncate(path, 20)
    assert_refused(path, 0, "shorter than its 40-byte header")


@pytest.mark.parametrize("length", [0, 3, 2**31, 0x01010101])
def test_a_damaged_record_length_is_refused_with_no_absurd_term(tmp_path, length):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    with open(path, "r+b") as f:
        f.seek(offsets[6])
        f.write(struct.pack("<I", length))
    assert_refused(path, offsets[6])


def test_a_damaged_length_in_a_stock_journal_is_refused_too(tmp_path):
    path = str(tmp_path / "raft.journal")
    stock = FileJournal(path)
    for entry in ENTRIES:
        stock.add(*entry)
    stock._destroy()
    # pysyncobj's records: <I size, <QQ idx term, command, <I size.
    third = FIRST_RECORD_OFFSET + sum(len(e[0]) + 24 for e in ENTRIES[:2])
    with open(path, "r+b") as f:
        f.seek(third)
        f.write(struct.pack("<I", 1000))
    assert_refused(path, third, "length")


def test_a_torn_tail_never_flushed_is_dropped_and_logged(tmp_path, caplog):
    # The header's end offset reached the disk, the pages of the last records did not (zeros).
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    end = end_offset(path)
    with open(path, "r+b") as f:
        f.seek(offsets[6])
        f.write(b"\0" * (end - offsets[6]))
    with caplog.at_level("WARNING"):
        journal = GroupCommitJournal(path, None)
    assert list(journal) == ENTRIES[:6]
    assert "torn tail" in caplog.text and str(offsets[6]) in caplog.text
    journal.add(*ENTRIES[6])  # appends go on where the torn records were
    assert journal.flush_if_dirty()
    journal._destroy()
    assert list(CompactionGuardedJournal(path, None)) == ENTRIES[:7]
    assert end_offset(path) == offsets[7]


def test_zeros_followed_by_data_are_not_a_torn_tail(tmp_path):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path)
    with open(path, "r+b") as f:
        f.seek(offsets[5])
        f.write(b"\0" * 8)  # the last records after it are whole: damage, not a torn write
    assert_refused(path, offsets[5])


def test_an_empty_journal_is_a_fresh_start_without_meta_and_damage_with_it(tmp_path):
    path = str(tmp_path / "raft.journal")
    open(path, "wb").close()
    journal = GroupCommitJournal(path, None)  # a first start killed before the header was written
    assert len(journal) == 0
    journal.setCurrentTerm(3, None)
    journal._destroy()
    open(path, "wb").close()
    assert_refused(path, 0, "empty")


def test_a_garbage_header_is_refused(tmp_path):
    path = str(tmp_path / "raft.journal")
    write_journal(path)
    with open(path, "r+b") as f:
        f.write(b"garbage!")
    assert_refused(path, 0, "PYSYNCOBJ")


# -- .meta ---------------------------------------------------------------------------------------------

def write_meta_and_journal(tmp_path, content: bytes) -> str:
    path = str(tmp_path / "raft.journal")
    write_journal(path)
    with open(path + ".meta", "wb") as f:
        f.write(content)
    return path + ".meta"


@pytest.mark.parametrize("content, word", [
    (b"", "empty"),
    (b"\x13\x37 not a pickle at all", "cannot be read"),
    (pysyncobj_dumps([1, 2, 3]), "list"),
    (pysyncobj_dumps({"currentTerm": 6435776235003934799, "votedForNodeId": None}), "implausible term"),
    (pysyncobj_dumps({"currentTerm": -1}), "implausible term"),
    (pysyncobj_dumps({"currentTerm": 4, "votedForNodeId": 17}), "implausible vote"),
])
def test_a_damaged_meta_is_refused_instead_of_resetting_term_and_vote(tmp_path, content, word):
    meta_path = write_meta_and_journal(tmp_path, content)
    assert_refused(meta_path, 0, word, kind=GroupCommitJournal)


def test_a_good_meta_and_a_missing_meta_load(tmp_path):
    path = str(tmp_path / "raft.journal")
    journal = GroupCommitJournal(path, None)
    journal.setCurrentTerm(9, "127.0.0.1:7001")
    journal.setRaftCommitIndex(4)
    journal.onOneSecondTimer()
    journal._destroy()
    reopened = GroupCommitJournal(path, None)
    assert (reopened.getCurrentTerm(), reopened.getVotedForNodeId(), reopened.getRaftCommitIndex()) == (9, "127.0.0.1:7001", 4)
    reopened._destroy()
    os.remove(path + ".meta")  # a node that never stored a term
    fresh = GroupCommitJournal(path, None)
    assert (fresh.getCurrentTerm(), fresh.getVotedForNodeId()) == (0, None)
    fresh._destroy()


# -- a torn tail: sectors of the last records never written (power loss between flushes) ----------------

LARGE_ENTRIES = [(b"\x01" + bytes([i]) * 1200, i, 1) for i in range(1, 9)]  # each record holds a whole 512-byte sector


def zero_sector_inside(path: str, start: int, stop: int) -> int:
    """Zero the first whole 512-byte sector inside [start, stop), as an unwritten sector reads in a
    preallocated file; its offset."""
    sector = -(-(start + 1) // 512) * 512
    assert sector + 512 <= stop
    with open(path, "r+b") as f:
        f.seek(sector)
        f.write(bytes(512))
    return sector


def test_a_torn_last_record_with_an_unwritten_sector_is_dropped_and_logged(tmp_path, caplog):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path, LARGE_ENTRIES)
    zero_sector_inside(path, offsets[7], end_offset(path))
    with caplog.at_level("WARNING"):
        journal = GroupCommitJournal(path, None)
    assert list(journal) == LARGE_ENTRIES[:7]
    assert "torn" in caplog.text and str(offsets[7]) in caplog.text
    journal._destroy()


def test_whole_records_after_a_torn_one_were_never_flushed_either_and_go_with_it(tmp_path, caplog):
    # Appends are in file order and a flush covers everything before it: a record written after one
    # that never reached the disk was not flushed either, whatever reached the disk of it.
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path, LARGE_ENTRIES)
    zero_sector_inside(path, offsets[5], offsets[6])
    with caplog.at_level("WARNING"):
        journal = GroupCommitJournal(path, None)
    assert list(journal) == LARGE_ENTRIES[:5]
    assert "torn" in caplog.text
    journal._destroy()


def test_a_flipped_byte_in_the_last_record_is_still_refused(tmp_path):
    path = str(tmp_path / "raft.journal")
    offsets = write_journal(path, LARGE_ENTRIES)
    flip_byte(path, offsets[7] + RECORD_HEAD.size + 1000)
    assert_refused(path, offsets[7], "checksum")
