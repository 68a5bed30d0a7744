"""A member compacts once when the log goes quiet after a burst (quiet_compaction.py): once and
only once per quiet index, after enough entries, the members one after the other."""

from __future__ import annotations

import pytest

from queen_raft.raft.compaction_turn import DEFAULT_STAGGER_S, MIN_STAGGER_S, WRITER_MARGIN, CompactionTurn
from queen_raft.raft.quiet_compaction import QUIET_MIN_ENTRIES, QUIET_S, QuietCompaction, install_quiet_compaction

TICK_S = 0.05


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def members(clock: FakeClock, turn_entries: int = 666, count: int = 3) -> list[QuietCompaction]:
    return [QuietCompaction(CompactionTurn(rank, count, turn_entries), clock=clock) for rank in range(count)]


def burst(quiet: list[QuietCompaction], clock: FakeClock, start: int, entries: int) -> None:
    """Every member applies `entries` entries, one a tick; nothing is asked meanwhile."""
    for index in range(start, start + entries):
        clock.now += TICK_S
        assert not any(q.should_compact(index, index - start) for q in quiet)


def ticks_until_quiet_compactions(quiet: list[QuietCompaction], clock: FakeClock, index: int,
                                  past_snapshot: int, seconds: float) -> list[tuple[int, float]]:
    """(rank, seconds since the last entry) of each compaction asked over `seconds` of ticks."""
    started, asked = clock.now, []
    while clock.now - started < seconds:
        clock.now += TICK_S
        for q in quiet:
            if q.should_compact(index, past_snapshot):
                asked.append((q.turn.rank, round(clock.now - started, 2)))
    return asked


def test_after_a_burst_each_member_compacts_once_and_only_once_in_turn_one_stagger_apart():
    clock = FakeClock()
    quiet = members(clock)
    burst(quiet, clock, 1000, 500)  # ends at index 1499: turn 2, owned by rank 2
    asked = ticks_until_quiet_compactions(quiet, clock, 1499, 500, 600.0)
    assert [rank for rank, _ in asked] == [0, 1, 2]  # the next turn's owner (longest log) first
    at = [seconds for _, seconds in asked]
    assert at[0] >= QUIET_S and at[0] < QUIET_S + 0.2
    assert [round(b - a, 1) for a, b in zip(at, at[1:])] == [DEFAULT_STAGGER_S, DEFAULT_STAGGER_S]


def test_a_log_that_moves_a_little_and_goes_quiet_again_asks_for_nothing_more():
    clock = FakeClock()
    quiet = members(clock)
    burst(quiet, clock, 1000, 500)
    assert len(ticks_until_quiet_compactions(quiet, clock, 1499, 500, 30.0)) == 3
    # A few entries (a tick, a cancel) after the snapshot: fewer than the threshold.
    burst(quiet, clock, 1500, 3)
    assert ticks_until_quiet_compactions(quiet, clock, 1502, 3, 600.0) == []


def test_a_short_burst_is_not_worth_a_snapshot():
    clock = FakeClock()
    quiet = members(clock)
    burst(quiet, clock, 1000, QUIET_MIN_ENTRIES - 1)
    index = 1000 + QUIET_MIN_ENTRIES - 2
    assert ticks_until_quiet_compactions(quiet, clock, index, QUIET_MIN_ENTRIES - 1, 600.0) == []


def test_nothing_is_asked_while_entries_keep_coming():
    clock = FakeClock()
    quiet = members(clock)
    for index in range(1000, 1000 + 20 * 60 * 5):  # five minutes of an entry every 50 ms
        clock.now += TICK_S
        assert not any(q.should_compact(index, 5000) for q in quiet)


def test_the_stagger_follows_the_last_writer_and_the_first_waits_out_a_writer_started_at_the_turn():
    clock = FakeClock()
    quiet = members(clock)
    for q in quiet:
        q.turn.writer_seconds = 4.0
    burst(quiet, clock, 1332, 5 + QUIET_MIN_ENTRIES)  # the turn started (index 1332) just before the end
    last = 1332 + 4 + QUIET_MIN_ENTRIES
    asked = ticks_until_quiet_compactions(quiet, clock, last, QUIET_MIN_ENTRIES + 5, 600.0)
    stagger = WRITER_MARGIN * 4.0
    at = [seconds for _, seconds in asked]
    turn_entered_s = (5 + QUIET_MIN_ENTRIES - 1) * TICK_S  # before the last entry
    assert abs(at[0] - (stagger - turn_entered_s)) < 0.11
    assert [round(b - a, 1) for a, b in zip(at, at[1:])] == [stagger, stagger]


def test_the_stagger_has_a_floor_and_a_default():
    turn = CompactionTurn(0, 3, 666)
    assert turn.stagger_s() == DEFAULT_STAGGER_S
    turn.writer_seconds = 0.01
    assert turn.stagger_s() == MIN_STAGGER_S


ADDRS = ("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")


def test_every_quiet_index_gives_each_member_its_own_place_the_longest_log_first():
    turns = [CompactionTurn(rank, 3, 666, addresses=ADDRS) for rank in range(3)]
    for index in range(0, 5000, 41):
        assert sorted(t.quiet_place(index) for t in turns) == [0, 1, 2]
        owner_next = (index // 666 + 1) % 3
        assert turns[owner_next].quiet_place(index) == 0


def test_the_followers_go_before_the_leader():
    turns = [CompactionTurn(rank, 3, 666, addresses=ADDRS) for rank in range(3)]
    for index in range(0, 5000, 41):
        for leader_rank, leader in enumerate(ADDRS):
            places = [t.quiet_place(index, leader) for t in turns]
            assert sorted(places) == [0, 1, 2] and places[leader_rank] == 2


def test_a_single_member_compacts_after_the_quiet_time():
    clock = FakeClock()
    (quiet,) = members(clock, turn_entries=2000, count=1)
    burst([quiet], clock, 10, 100)
    ((rank, at),) = ticks_until_quiet_compactions([quiet], clock, 109, 100, 60.0)
    assert rank == 0 and QUIET_S - 0.01 <= at <= QUIET_S + TICK_S + 0.01


class FakeJournal:
    def __init__(self, indexes: list[int]) -> None:
        self.indexes = indexes


class FakeSerializer:
    writing = False


class FakeSyncObj:
    def __init__(self, applied: int, indexes: list[int]) -> None:
        self.raftLastApplied = applied
        self._SyncObj__raftLog = FakeJournal(indexes)
        self._SyncObj__serializer = FakeSerializer()
        self.callbacks = []
        self.forced = 0

    def _getLeader(self):
        return None

    def addOnTickCallback(self, callback) -> None:
        self.callbacks.append(callback)

    def forceLogCompaction(self) -> None:
        self.forced += 1


def test_the_tick_callback_forces_one_compaction_in_turn(monkeypatch):
    clock = FakeClock()
    turn = CompactionTurn(0, 1, 2000)
    syncobj = FakeSyncObj(500, list(range(400, 501)))
    quiet = install_quiet_compaction(syncobj, turn)
    quiet.clock = clock
    (tick,) = syncobj.callbacks
    for _ in range(200):
        clock.now += TICK_S
        tick()
    assert syncobj.forced == 1
    assert turn.may_start(500)  # the forced start does not wait for the turn


def test_the_tick_callback_looks_at_the_log_at_most_once_an_interval():
    """pysyncobj ticks on every message; the callback reads the group's state once per
    QUIET_CHECK_INTERVAL_S and returns at once on the ticks in between."""
    from queen_raft.raft.quiet_compaction import QUIET_CHECK_INTERVAL_S

    clock = FakeClock()
    syncobj = FakeSyncObj(500, list(range(400, 501)))
    looks = []
    syncobj._getLeader = lambda: looks.append(clock.now)
    quiet = install_quiet_compaction(syncobj, CompactionTurn(0, 1, 2000))
    quiet.clock = clock
    (tick,) = syncobj.callbacks
    start = clock.now
    for _ in range(10):
        tick()
        clock.now += QUIET_CHECK_INTERVAL_S / 4
    assert looks == pytest.approx([start, start + QUIET_CHECK_INTERVAL_S, start + 2 * QUIET_CHECK_INTERVAL_S])


def test_no_compaction_is_asked_while_the_members_own_writer_runs_and_it_is_asked_after():
    clock = FakeClock()
    (quiet,) = members(clock, turn_entries=2000, count=1)
    burst([quiet], clock, 10, 100)
    clock.now += 30.0
    assert not quiet.should_compact(109, 100, writing=True)
    clock.now += TICK_S
    assert quiet.should_compact(109, 100, writing=False)


def test_a_new_leader_starts_the_wait_again():
    clock = FakeClock()
    turns = [CompactionTurn(rank, 3, 666, addresses=ADDRS) for rank in range(3)]
    quiet = [QuietCompaction(turn, clock=clock) for turn in turns]
    index = 1400
    for q in quiet:
        q.should_compact(index, 500, ADDRS[0])
    # Place 0 (a follower) is due (a stagger after its first sight of the turn); the others wait.
    clock.now += DEFAULT_STAGGER_S + 0.2
    asked = [q.turn.rank for q in quiet if q.should_compact(index, 500, ADDRS[0])]
    assert len(asked) == 1 and asked[0] != 0
    # The leader changes: the former leader, a follower now, may not start at once.
    assert not any(q.should_compact(index, 500, ADDRS[asked[0]]) for q in quiet)
    clock.now += QUIET_S - 0.1
    assert not any(q.should_compact(index, 500, ADDRS[asked[0]]) for q in quiet)
