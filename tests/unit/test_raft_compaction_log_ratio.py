"""A member waits to compact until its log is worth a snapshot next to the last one
(compaction_turn.CompactionTurn.log_worth_a_snapshot)."""

from __future__ import annotations

from queen_raft.raft.compaction_turn import LOG_WORTH_A_SNAPSHOT_BYTES, CompactionTurn, register_turn
from queen_raft.raft.snapshot_writer import SnapshotSerializer

SNAPSHOT_BYTES = 10_000


class Log:
    def __init__(self, size: int | None) -> None:
        self.size = size

    def __call__(self) -> int | None:
        return self.size


def lone_member(tmp_path, log: Log, ratio: float = 0.5, snapshot_bytes: int | None = SNAPSHOT_BYTES) -> CompactionTurn:
    path = tmp_path / "raft.snapshot"
    if snapshot_bytes is not None:
        path.write_bytes(b"s" * snapshot_bytes)
    return CompactionTurn(rank=0, members=1, turn_entries=2000, log_bytes=log, snapshot_path=str(path),
                          log_to_snapshot_ratio=ratio)


def test_a_log_below_the_ratio_of_the_snapshot_waits_and_one_at_it_starts(tmp_path):
    log = Log(4_999)
    turn = lone_member(tmp_path, log)
    assert not turn.may_start(5000)
    log.size = 5_000
    assert turn.may_start(5000)


def test_a_member_whose_turn_it_is_still_waits_for_its_log(tmp_path):
    log = Log(100)
    turn = lone_member(tmp_path, log)
    turn.members, turn.rank, turn.turn_entries = 3, 1, 666
    assert not turn.may_start(700)  # its turn (700 // 666 == 1), but the log is small
    log.size = SNAPSHOT_BYTES
    assert turn.may_start(700)


def test_an_explicit_request_does_not_wait_for_the_log(tmp_path):
    turn = lone_member(tmp_path, Log(1))
    turn.force_next()
    assert turn.may_start(10)


def test_a_log_of_the_byte_bound_does_not_wait_however_large_the_snapshot(tmp_path):
    log = Log(LOG_WORTH_A_SNAPSHOT_BYTES - 1)
    turn = lone_member(tmp_path, log, ratio=1e9)
    assert not turn.may_start(10)
    log.size = LOG_WORTH_A_SNAPSHOT_BYTES
    assert turn.may_start(10)


def test_no_snapshot_yet_a_ratio_of_zero_or_an_unknown_log_do_not_wait(tmp_path):
    assert lone_member(tmp_path, Log(0), snapshot_bytes=None).may_start(10)
    assert lone_member(tmp_path, Log(0), ratio=0).may_start(10)
    assert lone_member(tmp_path, Log(None)).may_start(10)


def test_the_serializer_declines_a_small_log_without_forking(tmp_path):
    turn = lone_member(tmp_path, Log(10))
    register_turn(turn.snapshot_path, turn)
    serializer = SnapshotSerializer(turn.snapshot_path, 4096)
    serializer.serialize(([{}, b""], (b"\x00", 6, 1), (b"\x00", 5, 1), set()), 5)
    assert serializer._pid == 0 and serializer.snapshots_deferred == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.snapshot"]
