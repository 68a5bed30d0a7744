"""The members of a group take turns to write snapshots (compaction_turn.py), and the serializer
declines a request outside its member's turn."""

from __future__ import annotations

from queen_raft.raft.compaction_turn import CompactionTurn, register_turn
from queen_raft.raft.snapshot_writer import SnapshotSerializer

ADDRS = ["127.0.0.1:7003", "127.0.0.1:7001", "127.0.0.1:7002"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def turns(min_entries: int = 2000) -> list[CompactionTurn]:
    return [CompactionTurn.of(addr, [a for a in ADDRS if a != addr], min_entries) for addr in sorted(ADDRS)]


def test_ranks_follow_the_sorted_addresses_and_turns_split_the_compaction_interval():
    members = turns()
    assert [(t.rank, t.members, t.turn_entries) for t in members] == [(0, 3, 666), (1, 3, 666), (2, 3, 666)]


def test_exactly_one_member_may_start_at_any_applied_index():
    members = turns()
    for index in range(0, 6000, 37):
        starters = [t.rank for t in members if t.may_start(index)]
        assert starters == [(index // 666) % 3], index


def test_over_a_log_each_member_starts_in_its_own_third_of_every_cycle():
    members = turns()
    first_start = {}
    for index in range(2000, 4000):
        for turn in members:
            if turn.rank not in first_start and turn.may_start(index):
                first_start[turn.rank] = index
    starts = [first_start[rank] for rank in range(3)]
    assert starts == sorted(starts) and min(b - a for a, b in zip(starts, starts[1:])) >= 600


def test_a_member_kept_waiting_by_a_log_that_does_not_move_starts_after_the_wait():
    clock = FakeClock()
    turn = CompactionTurn(rank=1, members=3, turn_entries=666, max_wait_s=60.0, clock=clock)
    assert not turn.may_start(10)
    clock.now += 59
    assert not turn.may_start(10)
    clock.now += 1
    assert turn.may_start(10)
    assert not turn.may_start(10)  # the wait starts again after a start


def test_a_single_member_never_waits():
    turn = CompactionTurn.of("127.0.0.1:7001", [], 2000)
    assert all(turn.may_start(index) for index in range(0, 5000, 97))


def test_the_serializer_declines_outside_its_turn_without_forking(tmp_path):
    path = str(tmp_path / "raft.snapshot")
    register_turn(path, CompactionTurn(rank=2, members=3, turn_entries=10, clock=FakeClock()))
    serializer = SnapshotSerializer(path, 4096)
    serializer.serialize(([{}, b""], (b"\x00", 6, 1), (b"\x00", 5, 1), set()), 5)
    assert serializer._pid == 0 and serializer.snapshots_deferred == 1
    assert list(tmp_path.iterdir()) == []


def test_a_member_compacts_past_the_other_turns_and_half_its_own_and_a_lone_node_past_the_setting():
    members = turns(2000)
    assert [t.compaction_min_entries(2000) for t in members] == [1665, 1665, 1665]
    assert CompactionTurn.of("127.0.0.1:7001", [], 2000).compaction_min_entries(2000) == 2000
    assert CompactionTurn.of("127.0.0.1:7001", ["127.0.0.1:7002"], 2000).compaction_min_entries(2000) == 1500
    assert CompactionTurn.of("127.0.0.1:7001", ["127.0.0.1:7002"], 3).compaction_min_entries(3) == 3


def writer_starts(members: list[CompactionTurn], entries: int, unapplied: int, writer_entries: int) -> list[tuple[int, int]]:
    """(applied index, rank) of every writer start over `entries` applied entries, by pysyncobj's
    rule: a member not writing asks once its log (the entries since its last snapshot, plus the
    `unapplied` ones appended and not yet applied) is over its threshold, and the turn decides; a
    writer takes `writer_entries` entries to finish, and then the log is cut at its index."""
    snapshot_at = {turn.rank: 0 for turn in members}
    writing_until: dict[int, tuple[int, int]] = {}  # rank -> (finishes at, snapshot index)
    starts = []
    for applied in range(entries):
        for turn in members:
            rank = turn.rank
            if rank in writing_until:
                finishes_at, index = writing_until[rank]
                if applied >= finishes_at:
                    snapshot_at[rank] = index
                    del writing_until[rank]
                continue
            log_entries = applied + unapplied - snapshot_at[rank] + 1
            if log_entries > turn.compaction_min_entries(2000) and turn.may_start(applied):
                starts.append((applied, rank))
                writing_until[rank] = (applied + writer_entries, applied)
    return starts


def test_under_a_steady_load_the_writers_start_a_turn_apart_once_per_cycle_each():
    """Entries appended ahead of the apply make a log pass its threshold early: with a threshold of
    one turn, a member that started at its turn's start started again at the turn's end, next to
    the next member's start (two writers at once, every turn)."""
    for unapplied in (0, 1, 3, 20):
        starts = writer_starts(turns(2000), 20_000, unapplied, writer_entries=200)
        gaps = [b[0] - a[0] for a, b in zip(starts, starts[1:])]
        # The first writer of a new log starts mid-turn (every log fills at once); never two at once.
        assert min(gaps) >= 333, (unapplied, starts)
        steady = [b[0] - a[0] for a, b in zip(starts, starts[1:]) if a[0] >= 4000]
        assert min(steady) >= 600, (unapplied, starts)
        for rank in range(3):
            own = [index for index, who in starts if who == rank and index >= 4000]
            assert min(b - a for a, b in zip(own, own[1:])) >= 1990, (unapplied, rank, own)
        assert len(starts) >= 20_000 // 666 - 3


def test_a_forced_compaction_does_not_wait_for_the_turn_once():
    turn = CompactionTurn(rank=1, members=3, turn_entries=666, clock=FakeClock())
    turn.force_next()
    assert turn.may_start(10)
    assert not turn.may_start(10)
