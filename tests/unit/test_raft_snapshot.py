"""Snapshot files (checksummed, old gzip ones still read), the journal/snapshot reconciliation at
start, and the forked writer: only the node renames, a received snapshot is verified first."""

from __future__ import annotations

import gzip
import os
import time

import pysyncobj.pickle
import pytest
from pysyncobj.config import SERIALIZER_STATE

from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.snapshot_file import (
    EXIT_DATA_REFUSED,
    DataDirRefused,
    SnapshotDamaged,
    encode_snapshot,
    read_snapshot,
    verify_snapshot_file,
    write_snapshot,
)
from queen_raft.raft.compaction_turn import CompactionTurn, register_turn
from queen_raft.raft.forked_writer import OOM_SCORE_ADJ, prefer_this_process_for_the_oom_killer
from queen_raft.raft.snapshot_repair import rewrite_if_damaged
from queen_raft.raft.snapshot_writer import (
    FAILED_WRITER_PAUSE_FIRST_S,
    FAILED_WRITER_PAUSE_MAX_S,
    REWRITE_RETRY_S,
    WRITER_DELAY_ENV,
    SnapshotSerializer,
    writer_delay_s,
)

ENTRIES = [(b"\x00" + bytes([i]), i, 1) for i in range(1, 11)]


def dump_ending_at(position: int, state: bytes = b"state") -> tuple:
    """pysyncobj's dump tuple (data, last, prev, cluster) for a snapshot at ENTRIES[position]."""
    return ([{}, state], ENTRIES[position], ENTRIES[position - 1], set())


def write_gzip_dump(path, dump: tuple) -> None:
    with gzip.open(path, "wb") as file:
        pysyncobj.pickle.dump(dump, file)


def journal_with(path: str, entries, commit_index: int | None = None, kind=CompactionGuardedJournal):
    journal = kind(path, None)
    for entry in entries:
        journal.add(*entry)
    if commit_index is not None:
        journal.setRaftCommitIndex(commit_index)
        journal.onOneSecondTimer()  # stores the meta
    journal._destroy()


# -- the file ---------------------------------------------------------------------------------------


def test_a_snapshot_round_trips_and_verifies(tmp_path):
    path = tmp_path / "snap"
    path.write_bytes(encode_snapshot(dump_ending_at(5)))
    verify_snapshot_file(str(path))
    assert read_snapshot(str(path)) == dump_ending_at(5)


def test_a_snapshot_is_flushed_to_the_disk_as_it_is_written_and_reads_back_the_same(tmp_path, monkeypatch):
    # The state as a node's writer streams it: a list of chunks, pickled one at a time.
    dump = dump_ending_at(5, state=[os.urandom(50_000) for _ in range(6)])
    synced_lengths = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced_lengths.append(os.fstat(fd).st_size), real_fdatasync(fd)))
    syncs = write_snapshot(str(tmp_path / "snap"), dump, sync_every=64 * 1024)
    # 300 kB flushed as it goes, every two chunks (64 kB or more unflushed), not all at the end.
    assert syncs == len(synced_lengths) == 3
    assert synced_lengths == sorted(synced_lengths) and synced_lengths[0] < 150_000
    assert (tmp_path / "snap").read_bytes() == encode_snapshot(dump)
    verify_snapshot_file(str(tmp_path / "snap"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "extend", "empty", "garbage"])
def test_a_damaged_snapshot_is_refused_naming_the_file(tmp_path, damage):
    path = tmp_path / "snap"
    good = encode_snapshot(dump_ending_at(5, state=b"x" * 4096))
    damaged = {
        "truncate": good[: len(good) // 2],
        "flip": good[:-100] + bytes([good[-100] ^ 0x01]) + good[-99:],
        "extend": good + b"\x00",
        "empty": b"",
        "garbage": b"not a snapshot at all",
    }[damage]
    path.write_bytes(damaged)
    with pytest.raises(SnapshotDamaged) as raised:
        read_snapshot(str(path))
    assert raised.value.path == str(path)
    with pytest.raises(SnapshotDamaged):
        verify_snapshot_file(str(path))


def test_an_old_gzip_snapshot_still_loads_and_a_truncated_one_is_refused(tmp_path):
    path = tmp_path / "snap"
    write_gzip_dump(path, dump_ending_at(5, state=os.urandom(20_000)))
    verify_snapshot_file(str(path))
    assert read_snapshot(str(path))[1] == ENTRIES[5]
    path.write_bytes(path.read_bytes()[:-30])  # what a full disk or a torn copy leaves
    with pytest.raises(SnapshotDamaged):
        read_snapshot(str(path))
    with pytest.raises(SnapshotDamaged):
        verify_snapshot_file(str(path))


# -- the journal meets the snapshot at start ---------------------------------------------------------


def test_a_snapshot_older_than_the_journal_head_with_a_gap_refuses_to_start(tmp_path):
    """What an orphaned writer left: its old snapshot over a journal compacted past it. Stock
    pysyncobj cleared the journal to the snapshot's two entries and clamped the commit index."""
    path, snap = str(tmp_path / "raft.journal"), tmp_path / "raft.snapshot"
    journal_with(path, ENTRIES[6:], commit_index=10)  # compacted at a snapshot ending at 8
    snap.write_bytes(encode_snapshot(dump_ending_at(2)))  # ends at index 3
    with pytest.raises(DataDirRefused) as raised:
        GroupCommitJournal(path, str(snap))
    message = str(raised.value)
    assert str(snap) in message and "entries 4..6 are in neither" in message
    assert "wipe this node's data dir and restart it" in message
    assert raised.value.exit_code == EXIT_DATA_REFUSED == 65
    assert [tuple(e) for e in CompactionGuardedJournal(path)] == ENTRIES[6:]  # nothing cleared


def test_a_damaged_snapshot_refuses_to_start(tmp_path):
    path, snap = str(tmp_path / "raft.journal"), tmp_path / "raft.snapshot"
    journal_with(path, ENTRIES[4:], commit_index=10)
    snap.write_bytes(encode_snapshot(dump_ending_at(5))[:-7])
    with pytest.raises(DataDirRefused, match="the snapshot cannot be loaded: payload is"):
        CompactionGuardedJournal(path, str(snap))


def test_a_commit_index_beyond_what_is_held_refuses_to_start(tmp_path):
    path = str(tmp_path / "raft.journal")
    journal_with(path, ENTRIES[:4], commit_index=9)
    with pytest.raises(DataDirRefused, match=r"commit index \(9\) is beyond the last entry .* \(4\)"):
        GroupCommitJournal(path, str(tmp_path / "raft.snapshot"))


def test_an_uncommitted_tail_that_conflicts_with_the_snapshot_is_dropped(tmp_path):
    # A follower's stale entries 5..7 of term 1; the leader's snapshot (term 2) ends at 6.
    path, snap = str(tmp_path / "raft.journal"), tmp_path / "raft.snapshot"
    journal_with(path, ENTRIES[:7], commit_index=4)
    last, prev = (b"\x07", 6, 2), (b"\x06", 5, 2)
    snap.write_bytes(encode_snapshot(([{}, b"state"], last, prev, set())))
    journal = CompactionGuardedJournal(path, str(snap))
    assert [tuple(e) for e in journal] == [prev, last]


def test_a_fresh_data_dir_opens(tmp_path):
    journal = GroupCommitJournal(str(tmp_path / "raft.journal"), str(tmp_path / "raft.snapshot"))
    assert len(journal) == 0


def test_a_snapshot_covering_the_whole_journal_is_left_to_the_load(tmp_path):
    # A follower that installed the leader's snapshot and died before clearing its journal.
    path, snap = str(tmp_path / "raft.journal"), tmp_path / "raft.snapshot"
    journal_with(path, ENTRIES[:3], commit_index=3)
    snap.write_bytes(encode_snapshot(dump_ending_at(8)))
    journal = CompactionGuardedJournal(path, str(snap))
    assert [tuple(e) for e in journal] == ENTRIES[:3] and not journal.reconciled_with_snapshot


def test_a_journal_starting_right_after_the_snapshot_keeps_every_entry(tmp_path):
    path, snap = str(tmp_path / "raft.journal"), tmp_path / "raft.snapshot"
    journal_with(path, ENTRIES[6:], commit_index=10)
    snap.write_bytes(encode_snapshot(dump_ending_at(5)))  # ends at 6; the journal starts at 7
    journal = CompactionGuardedJournal(path, str(snap))
    assert [tuple(e) for e in journal] == ENTRIES[4:]


# -- the writer ----------------------------------------------------------------------------------------


def wait_for_state(serializer, state, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        current, _ = serializer.checkSerializing()
        if current == state:
            return
        assert current == SERIALIZER_STATE.SERIALIZING and time.monotonic() < deadline, current
        time.sleep(0.01)


def test_only_the_node_renames_the_writer_file_into_place(tmp_path):
    snap = tmp_path / "raft.snapshot"
    snap.write_bytes(encode_snapshot(dump_ending_at(2)))
    serializer = SnapshotSerializer(str(snap), 4096)
    serializer.serialize(dump_ending_at(6), 5)
    # The child exits after writing its own tmp file; until the node has seen it succeed, the
    # snapshot in place is the old one.
    os.waitid(os.P_PID, serializer._pid, os.WEXITED | os.WNOWAIT)
    assert read_snapshot(str(snap))[1] == ENTRIES[2]
    tmp_files = [p.name for p in tmp_path.iterdir() if p.name != "raft.snapshot"]
    assert len(tmp_files) == 1 and tmp_files[0].startswith("raft.snapshot.writing.")
    wait_for_state(serializer, SERIALIZER_STATE.SUCCESS)
    assert read_snapshot(str(snap))[1] == ENTRIES[6]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.snapshot"]


def test_stop_writer_kills_and_reaps_a_running_writer(tmp_path, monkeypatch):
    monkeypatch.setenv("QUEEN_TEST_HOOKS", "1")
    monkeypatch.setenv(WRITER_DELAY_ENV, "30000")
    snap = tmp_path / "raft.snapshot"
    serializer = SnapshotSerializer(str(snap), 4096)
    serializer.serialize(dump_ending_at(6), 5)
    pid = serializer._pid
    serializer.stop_writer()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped
    assert list(tmp_path.iterdir()) == []
    assert serializer.checkSerializing()[0] == SERIALIZER_STATE.NOT_SERIALIZING


def test_a_running_writer_is_the_oom_killers_first_choice_and_its_node_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("QUEEN_TEST_HOOKS", "1")
    monkeypatch.setenv(WRITER_DELAY_ENV, "30000")  # holds the writer before it writes
    serializer = SnapshotSerializer(str(tmp_path / "raft.snapshot"), 4096)
    node_score = open("/proc/self/oom_score_adj").read().strip()
    serializer.serialize(dump_ending_at(6), 5)
    writer = f"/proc/{serializer._pid}/oom_score_adj"
    try:
        deadline = time.monotonic() + 10
        while open(writer).read().strip() != str(OOM_SCORE_ADJ):
            assert time.monotonic() < deadline, "the writer never raised its OOM score"
            time.sleep(0.01)
        assert open("/proc/self/oom_score_adj").read().strip() == node_score
    finally:
        serializer.stop_writer()


def test_a_child_that_may_not_raise_its_oom_score_still_writes(tmp_path):
    assert prefer_this_process_for_the_oom_killer(str(tmp_path / "missing" / "oom_score_adj")) is False


def test_the_writer_delay_hook_needs_the_test_hooks_flag():
    with pytest.raises(ValueError, match="QUEEN_TEST_HOOKS"):
        writer_delay_s({WRITER_DELAY_ENV: "100"})
    assert writer_delay_s({WRITER_DELAY_ENV: "100", "QUEEN_TEST_HOOKS": "1"}) == 0.1
    assert writer_delay_s({}) == 0.0


def test_a_new_serializer_removes_what_dead_writers_left(tmp_path):
    snap = tmp_path / "raft.snapshot"
    snap.write_bytes(b"kept")
    for name in ("raft.snapshot.writing.123.ab12cd34", "raft.snapshot.receiving", "raft.snapshot.tmp",
                 "raft.snapshot.1.tmp"):
        (tmp_path / name).write_bytes(b"stale")
    SnapshotSerializer(str(snap), 4096)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.snapshot"]


# -- transfers --------------------------------------------------------------------------------------


def transfer(sender: SnapshotSerializer, receiver: SnapshotSerializer) -> bool:
    installed = False
    while True:
        chunk = sender.getTransmissionData("follower")
        if chunk is None:
            return installed
        installed = receiver.setTransmissionData(chunk)
        if chunk[2]:
            return installed


def test_a_verified_snapshot_is_sent_and_installed(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    leader_snap, follower_snap = tmp_path / "a" / "raft.snapshot", tmp_path / "b" / "raft.snapshot"
    leader_snap.write_bytes(encode_snapshot(dump_ending_at(8, state=os.urandom(10_000))))
    follower_snap.write_bytes(encode_snapshot(dump_ending_at(2)))
    assert transfer(SnapshotSerializer(str(leader_snap), 1000), SnapshotSerializer(str(follower_snap), 1000))
    assert follower_snap.read_bytes() == leader_snap.read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_node_never_sends_the_last_chunk_of_a_snapshot_it_cannot_verify(tmp_path, damage):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    leader_snap, follower_snap = tmp_path / "a" / "raft.snapshot", tmp_path / "b" / "raft.snapshot"
    good = encode_snapshot(dump_ending_at(8, state=os.urandom(10_000)))
    leader_snap.write_bytes(good[:-5] if damage == "truncate" else good[:5000] + bytes([good[5000] ^ 1]) + good[5001:])
    follower_snap.write_bytes(encode_snapshot(dump_ending_at(2)))
    before = follower_snap.read_bytes()
    sender, receiver = SnapshotSerializer(str(leader_snap), 1000), SnapshotSerializer(str(follower_snap), 1000)
    assert transfer(sender, receiver) is False
    assert follower_snap.read_bytes() == before
    assert sender.getTransmissionData("follower") is None  # known damaged: not even a first chunk again


def test_an_old_gzip_snapshot_that_does_not_verify_is_not_sent_at_all(tmp_path):
    snap = tmp_path / "raft.snapshot"
    write_gzip_dump(snap, dump_ending_at(8, state=os.urandom(5000)))
    snap.write_bytes(snap.read_bytes()[:-20])
    assert SnapshotSerializer(str(snap), 1000).getTransmissionData("follower") is None


def test_a_damaged_snapshot_from_the_leader_is_rejected_and_the_old_one_kept(tmp_path):
    snap = tmp_path / "raft.snapshot"
    old = encode_snapshot(dump_ending_at(2))
    snap.write_bytes(old)
    receiver = SnapshotSerializer(str(snap), 1000)
    sent = encode_snapshot(dump_ending_at(8, state=os.urandom(3000)))
    damaged = sent[:-10]
    assert receiver.setTransmissionData((damaged[:2000], True, False)) is False
    assert receiver.setTransmissionData((damaged[2000:], False, False)) is False
    assert receiver.setTransmissionData((b"", False, True)) is False
    assert snap.read_bytes() == old and receiver.snapshots_rejected == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.snapshot"]


class CompactingSyncObj:
    """What snapshot_repair touches of a SyncObj: the last serialized index and the forced compaction."""

    def __init__(self, last_serialized) -> None:
        self._SyncObj__lastSerializedEntry = last_serialized
        self.compactions_asked = 0

    def forceLogCompaction(self) -> None:
        self.compactions_asked += 1


def test_a_leader_that_finds_its_snapshot_damaged_writes_a_new_one_once_its_writer_is_done(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    leader_snap, follower_snap = tmp_path / "a" / "raft.snapshot", tmp_path / "b" / "raft.snapshot"
    leader_snap.write_bytes(encode_snapshot(dump_ending_at(8, state=os.urandom(10_000)))[:-5])
    sender = SnapshotSerializer(str(leader_snap), 1000)
    syncobj, turn = CompactingSyncObj(last_serialized=8), CompactionTurn(rank=1, members=3, turn_entries=10)
    assert rewrite_if_damaged(syncobj, sender, turn) is False  # nothing found damaged yet
    assert transfer(sender, SnapshotSerializer(str(follower_snap), 1000)) is False

    sender._pid = os.getpid()  # a writer of its own still runs: the rewrite waits for it
    assert rewrite_if_damaged(syncobj, sender, turn) is False and syncobj.compactions_asked == 0
    sender._pid = 0
    assert rewrite_if_damaged(syncobj, sender, turn) is True
    # pysyncobj writes nothing at the index it last serialized: the repair makes it forget that index.
    assert syncobj._SyncObj__lastSerializedEntry is None and syncobj.compactions_asked == 1
    assert turn.may_start(0)  # outside this member's turn (index 0 is rank 0's)
    assert rewrite_if_damaged(syncobj, sender, turn) is False  # once per damaged file
    assert sender.getTransmissionData("follower") is None
    assert rewrite_if_damaged(syncobj, sender, turn) is False


def fail_a_writer(serializer: SnapshotSerializer) -> tuple:
    """A forked writer that exits as a writer does when its write fails (a full disk, say)."""
    pid = os.fork()
    if pid == 0:
        os._exit(1)
    serializer._pid, serializer._tmp_path = pid, None
    while True:
        state, _ = serializer.checkSerializing()
        if state != SERIALIZER_STATE.SERIALIZING:
            return state


def test_a_rewrite_whose_writer_fails_is_asked_for_again_after_a_pause_while_the_file_is_damaged(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    leader_snap, follower_snap = tmp_path / "a" / "raft.snapshot", tmp_path / "b" / "raft.snapshot"
    leader_snap.write_bytes(encode_snapshot(dump_ending_at(8, state=os.urandom(10_000)))[:-5])
    sender = SnapshotSerializer(str(leader_snap), 1000)
    syncobj, turn = CompactingSyncObj(last_serialized=8), CompactionTurn(rank=1, members=3, turn_entries=10)
    assert transfer(sender, SnapshotSerializer(str(follower_snap), 1000)) is False
    assert rewrite_if_damaged(syncobj, sender, turn) is True and syncobj.compactions_asked == 1

    before = time.monotonic()
    assert fail_a_writer(sender) == SERIALIZER_STATE.FAILED
    assert sender.rewrite_wanted is True
    assert sender.rewrite_not_before - before >= REWRITE_RETRY_S
    assert rewrite_if_damaged(syncobj, sender, turn) is False  # not before the pause is over
    sender.rewrite_not_before = time.monotonic() - 0.001
    assert rewrite_if_damaged(syncobj, sender, turn) is True and syncobj.compactions_asked == 2

    # Once a good file is in place, a failing writer asks for nothing more.
    leader_snap.write_bytes(encode_snapshot(dump_ending_at(9)))
    assert fail_a_writer(sender) == SERIALIZER_STATE.FAILED
    assert sender.rewrite_wanted is False
    assert transfer(sender, SnapshotSerializer(str(follower_snap), 1000)) is True


def test_after_a_failed_writer_the_next_waits_a_pause_that_doubles_and_a_success_clears_it(tmp_path):
    snap = tmp_path / "raft.snapshot"
    turn = CompactionTurn(rank=0, members=1, turn_entries=10)
    register_turn(str(snap), turn)
    serializer = SnapshotSerializer(str(snap), 4096)
    before = time.monotonic()
    assert fail_a_writer(serializer) == SERIALIZER_STATE.FAILED
    first_pause = serializer.retry_not_before - before
    assert FAILED_WRITER_PAUSE_FIRST_S <= first_pause < FAILED_WRITER_PAUSE_FIRST_S + 1.0

    # pysyncobj asks again at every tick: no writer is forked during the pause.
    serializer.serialize(dump_ending_at(6), 5)
    assert serializer._pid == 0 and serializer.snapshots_deferred == 1
    before = time.monotonic()
    assert fail_a_writer(serializer) == SERIALIZER_STATE.FAILED
    assert serializer.retry_not_before - before >= 2 * FAILED_WRITER_PAUSE_FIRST_S
    for _ in range(20):
        fail_a_writer(serializer)
    assert serializer.retry_not_before - time.monotonic() <= FAILED_WRITER_PAUSE_MAX_S

    # A compaction asked for explicitly starts at once, once.
    turn.force_next()
    serializer.serialize(dump_ending_at(6), 5)
    assert serializer._pid != 0
    wait_for_state(serializer, SERIALIZER_STATE.SUCCESS)
    assert read_snapshot(str(snap))[1] == ENTRIES[6]
    assert serializer.writers_failed == 0 and serializer.retry_not_before == 0.0
    serializer.serialize(dump_ending_at(7), 6)
    assert serializer._pid != 0
    wait_for_state(serializer, SERIALIZER_STATE.SUCCESS)
