"""A compaction the serializer would decline is not prepared (raft/compaction_gate.py), and the
turn's side-effect-free answer agrees with may_start (compaction_turn.declines_without_change)."""

from __future__ import annotations

import copy
import random

import pytest
from pysyncobj import SyncObj

from queen_raft.raft.compaction_gate import CompactionGateSyncObj
from queen_raft.raft.compaction_turn import CompactionTurn, register_turn
from queen_raft.raft.snapshot_writer import SnapshotSerializer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Log:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self) -> int:
        return self.size


@pytest.mark.parametrize("seed", range(20))
def test_declining_without_change_means_may_start_declines_and_changes_nothing(tmp_path, seed):
    rng = random.Random(seed)
    snapshot = tmp_path / "raft.snapshot"
    snapshot.write_bytes(b"s" * 1000)
    clock, log = FakeClock(), Log(0)
    turn = CompactionTurn(rank=rng.randrange(3), members=3, turn_entries=10, max_wait_s=5.0, clock=clock,
                          log_bytes=log, snapshot_path=str(snapshot), log_to_snapshot_ratio=0.5)
    declined = started = 0
    for _ in range(300):
        clock.now += rng.choice([0.0, 0.5, 2.0, 6.0])
        log.size = rng.choice([10, 499, 500, 5000])
        if rng.random() < 0.05:
            turn.force_next()
        index = rng.randrange(100)
        before = copy.copy(turn)
        if turn.declines_without_change(index):
            declined += 1
            assert not turn.may_start(index)
            assert (turn._waiting_since, turn._forced) == (before._waiting_since, before._forced)
        else:
            started += turn.may_start(index)
    assert declined and started  # the sequence met both answers


class Gated(CompactionGateSyncObj):
    """The gate alone, on the attributes it reads: no node, no sockets."""

    def __init__(self, serializer, log_entries: int, min_entries: int = 100) -> None:
        conf = type("Conf", (), {"logCompactionMinEntries": min_entries, "logCompactionMinTime": 300})()
        self._SyncObj__serializer = serializer
        self._SyncObj__forceLogCompaction = False
        self._SyncObj__raftLastApplied = 50
        self._SyncObj__raftLog = [None] * log_entries
        self._SyncObj__conf = conf
        self._SyncObj__lastSerializedTime = float("inf")  # the time threshold never passes


@pytest.fixture
def stock_attempts(monkeypatch):
    attempts = []
    monkeypatch.setattr(SyncObj, "_SyncObj__tryLogCompaction", lambda self: attempts.append(self))
    return attempts


def serializer_outside_its_turn(tmp_path, waiting: bool) -> SnapshotSerializer:
    path = str(tmp_path / "raft.snapshot")
    turn = CompactionTurn(rank=2, members=3, turn_entries=10, clock=FakeClock())
    if waiting:
        assert not turn.may_start(5)  # index 5 is rank 0's turn: the wait starts
    register_turn(path, turn)
    return SnapshotSerializer(path, 4096)


def test_a_declined_compaction_is_not_prepared_and_counts_as_deferred(tmp_path, stock_attempts):
    serializer = serializer_outside_its_turn(tmp_path, waiting=True)
    node = Gated(serializer, log_entries=101)
    node._SyncObj__tryLogCompaction()
    assert stock_attempts == [] and serializer.snapshots_deferred == 1


def test_the_stock_path_runs_when_the_turn_would_change_or_the_writer_is_asked_for(tmp_path, stock_attempts):
    not_waiting = Gated(serializer_outside_its_turn(tmp_path / "a", waiting=False), log_entries=101)
    not_waiting._SyncObj__tryLogCompaction()  # serialize() must start the turn's wait
    forced = Gated(serializer_outside_its_turn(tmp_path / "b", waiting=True), log_entries=101)
    forced._SyncObj__forceLogCompaction = True
    forced._SyncObj__tryLogCompaction()
    assert stock_attempts == [not_waiting, forced]


def test_a_running_writer_and_a_short_log_take_the_stock_path_uncounted(tmp_path, stock_attempts):
    serializer = serializer_outside_its_turn(tmp_path, waiting=True)
    writing = Gated(serializer, log_entries=101)
    serializer._pid = 12345  # pysyncobj must still collect it
    writing._SyncObj__tryLogCompaction()
    serializer._pid = 0
    short = Gated(serializer, log_entries=100)
    short._SyncObj__tryLogCompaction()  # the stock gate returns before preparing anything
    assert stock_attempts == [writing, short] and serializer.snapshots_deferred == 0


def test_writers_paused_after_a_failure_decline_early(tmp_path, stock_attempts):
    path = str(tmp_path / "raft.snapshot")
    register_turn(path, CompactionTurn(rank=0, members=1, turn_entries=10))
    serializer = SnapshotSerializer(path, 4096)
    serializer._pause_next_writer(1)
    Gated(serializer, log_entries=101)._SyncObj__tryLogCompaction()
    assert stock_attempts == [] and serializer.snapshots_deferred == 1
