"""The leader tick's decision step (queen_raft.raft.tick.decide), alone and driving a simulated drain.

Properties: no two ticks closer than the minimum gap; never asleep past the next due instant plus
the loop's timer granularity (unless a tick in flight covers what is due); never more than
TICKS_IN_FLIGHT_MAX ticks in flight; a leader with something due always ends up proposing.

In the simulation the group clock and the loop clock are one clock (seconds, wall ms = floor of
it); a Sleep lasts exactly its length, a Wait until its timeout or the first wake-up (a tick's
outcome, or an apply of a timer due before `wake_below_ms`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from queen_raft.raft.tick import (
    LEADERSHIP_WATCH_S,
    LOOP_TIMER_GRANULARITY_S,
    TICK_COMMIT_TIMEOUT_S,
    TICKS_IN_FLIGHT_MAX,
    Propose,
    Sleep,
    TickView,
    Wait,
    decide,
    latest_outcome,
)

EPOCH_MS = 1_700_000_000_000
FLOAT_SLACK_S = 1e-9

TICK_MS = st.integers(1, 5000)
MIN_GAP_MS = st.integers(1, 100)


@st.composite
def views(draw, leading=st.booleans(), in_flight=st.integers(0, TICKS_IN_FLIGHT_MAX)):
    loop_now_s = draw(st.floats(0, 1e5))
    since_last_tick_s = draw(st.one_of(st.none(), st.floats(0, 1.0)))
    more_due = draw(st.booleans())
    now_ms = EPOCH_MS + draw(st.integers(0, 10**6))
    next_due_ms = None if more_due else draw(st.one_of(st.none(), st.integers(now_ms - 10_000, now_ms + 10_000)))
    return TickView(
        leading=draw(leading), more_due=more_due, next_due_ms=next_due_ms, now_ms=now_ms,
        loop_now_s=loop_now_s,
        last_tick_s=-math.inf if since_last_tick_s is None else loop_now_s - since_last_tick_s,
        in_flight=draw(in_flight),
    )


def gap_left_s(view: TickView, min_gap_ms: int) -> float:
    return view.last_tick_s + min_gap_ms / 1000 - view.loop_now_s


def something_due(view: TickView) -> bool:
    return view.more_due or (view.next_due_ms is not None and view.next_due_ms <= view.now_ms)


@given(views(), TICK_MS, MIN_GAP_MS)
def test_a_tick_is_proposed_only_past_the_gap_and_under_the_in_flight_bound(view, tick_ms, min_gap_ms):
    decision = decide(view, tick_ms, min_gap_ms / 1000)
    if isinstance(decision, Propose):
        assert view.leading and something_due(view)
        assert 0 <= decision.blocking_s < LOOP_TIMER_GRANULARITY_S
        # The tick is stamped after the blocking part: by then the gap is over.
        assert view.loop_now_s + decision.blocking_s >= view.last_tick_s + min_gap_ms / 1000 - FLOAT_SLACK_S
        assert view.in_flight < TICKS_IN_FLIGHT_MAX
        if not view.more_due:
            assert view.in_flight == 0  # outside a drain, one tick at a time


@given(views(leading=st.just(True), in_flight=st.just(0)), TICK_MS, MIN_GAP_MS)
def test_a_leader_with_nothing_in_flight_never_sleeps_past_the_next_due_instant(view, tick_ms, min_gap_ms):
    decision = decide(view, tick_ms, min_gap_ms / 1000)
    asleep_s = {Propose: lambda d: d.blocking_s, Sleep: lambda d: d.seconds, Wait: lambda d: d.timeout_s}[type(decision)](decision)
    assert asleep_s >= 0
    if view.more_due:
        # A drain: only the rest of the minimum gap is waited out.
        assert asleep_s <= max(0.0, gap_left_s(view, min_gap_ms)) + FLOAT_SLACK_S
        return
    if view.next_due_ms is None:
        # No timer: no clock step can make one due, and any timer applied before the loop would
        # wake on its own wakes it (note_applied): it waits for that, or the leadership watch.
        assert decision == Wait(LEADERSHIP_WATCH_S, view.now_ms + LEADERSHIP_WATCH_S * 1000)
        return
    due_in_s = max(0.0, (view.next_due_ms - view.now_ms) / 1000)
    assert asleep_s <= max(due_in_s, gap_left_s(view, min_gap_ms)) + LOOP_TIMER_GRANULARITY_S
    if isinstance(decision, Wait):
        # No lost wake-up: a timer applied meanwhile that falls due before the loop wakes, wakes it.
        assert decision.wake_below_ms - view.now_ms >= decision.timeout_s * 1000 - FLOAT_SLACK_S


@given(views(), TICK_MS, MIN_GAP_MS)
def test_a_wait_deaf_to_applies_is_only_for_a_follower_or_a_tick_in_flight(view, tick_ms, min_gap_ms):
    decision = decide(view, tick_ms, min_gap_ms / 1000)
    if isinstance(decision, Wait) and decision.wake_below_ms == -math.inf:
        if view.leading:
            assert view.in_flight > 0 and something_due(view)
            assert decision.timeout_s == TICK_COMMIT_TIMEOUT_S
        else:
            assert decision.timeout_s == LEADERSHIP_WATCH_S


@given(views(leading=st.just(True)), TICK_MS, MIN_GAP_MS,
       st.lists(st.floats(0, TICK_COMMIT_TIMEOUT_S), min_size=TICKS_IN_FLIGHT_MAX, max_size=TICKS_IN_FLIGHT_MAX))
def test_a_leader_with_something_due_ends_up_proposing(view, tick_ms, min_gap_ms, settle_after_s):
    """Step the loop's clock through each Sleep; a Wait may only wait for a tick in flight, which
    settles (its outcome wakes the loop) after at most the commit timeout."""
    if not something_due(view):
        view = replace(view, next_due_ms=view.now_ms)
    start_s, waited_for_ticks_s = view.loop_now_s, 0.0
    for _ in range(3 + 2 * TICKS_IN_FLIGHT_MAX):
        decision = decide(view, tick_ms, min_gap_ms / 1000)
        if isinstance(decision, Propose):
            break
        if isinstance(decision, Sleep):
            assert decision.seconds > 0
            step_s = decision.seconds
        else:
            assert view.in_flight > 0, decision
            step_s = settle_after_s[view.in_flight - 1]
            waited_for_ticks_s += step_s
            view = replace(view, in_flight=view.in_flight - 1)
        view = replace(view, loop_now_s=view.loop_now_s + step_s, now_ms=view.now_ms + math.ceil(step_s * 1000))
    else:
        raise AssertionError(f"no tick proposed: {view}")
    proposed_at_s = view.loop_now_s + decision.blocking_s
    gap_end_s = view.last_tick_s + min_gap_ms / 1000
    assert proposed_at_s <= max(start_s, gap_end_s) + waited_for_ticks_s + LOOP_TIMER_GRANULARITY_S


@given(st.booleans(), st.lists(st.tuples(st.booleans(), st.sampled_from([0.0, 0.0, 0.1, 1.0]))))
def test_the_latest_outcome_says_whether_more_is_due_and_the_longest_backoff_holds(more_due, outcomes):
    got_more_due, backoff_s = latest_outcome(more_due, outcomes)
    assert got_more_due == (outcomes[-1][0] if outcomes else more_due)
    assert backoff_s == max((b for _, b in outcomes), default=0.0)


# -- a simulated group: arrivals of timers, ticks that commit after a latency, in log order ----------

class SimulatedGroup:
    def __init__(self, arrivals: list[tuple[float, int]], fire_batch: int, latencies_s: list[float]) -> None:
        self.t = 0.0
        self.arrivals = sorted(arrivals)  # (arrives at s, due in ms after it arrives)
        self.pending: list[int] = []  # due instants (wall ms) of the timers applied and not fired
        self.fire_batch = fire_batch
        self.latencies_s = latencies_s
        self.in_flight: list[tuple[float, int]] = []  # (commits at s, stamp ms), in log order
        self.outcomes: list[tuple[bool, float]] = []
        self.proposals_s: list[float] = []
        self.fired = 0

    def now_ms(self, t: float | None = None) -> int:
        return EPOCH_MS + math.floor((self.t if t is None else t) * 1000)

    def next_wake_up_s(self, wake_below_ms: float) -> float:
        """When something wakes a Wait: the next tick's commit, or an arrival due before the bound."""
        events = [commits_at for commits_at, _ in self.in_flight[:1]]
        events += [at for at, due_in_ms in self.arrivals if self.now_ms(at) + due_in_ms < wake_below_ms][:1]
        return min(events, default=math.inf)

    def advance(self, until_s: float) -> None:
        """Apply what happens up to until_s: arrivals, and commits (fires) in log order."""
        while True:
            next_arrival = self.arrivals[0][0] if self.arrivals else math.inf
            next_commit = self.in_flight[0][0] if self.in_flight else math.inf
            if min(next_arrival, next_commit) > until_s:
                break
            if next_arrival <= next_commit:
                at, due_in_ms = self.arrivals.pop(0)
                self.pending.append(self.now_ms(at) + due_in_ms)
            else:
                _, stamp_ms = self.in_flight.pop(0)
                due = sorted(d for d in self.pending if d <= stamp_ms)
                for d in due[:self.fire_batch]:
                    self.pending.remove(d)
                self.fired += min(len(due), self.fire_batch)
                self.outcomes.append((len(due) > self.fire_batch, 0.0))
        self.t = max(self.t, until_s)

    def propose(self, latency_s: float) -> None:
        last_commit_s = self.in_flight[-1][0] if self.in_flight else self.t
        self.in_flight.append((max(last_commit_s, self.t + latency_s), self.now_ms()))
        self.proposals_s.append(self.t)


ARRIVALS = st.lists(st.tuples(st.floats(0, 0.5), st.integers(-5, 200)), min_size=1, max_size=40)


@given(ARRIVALS, st.integers(1, 8), MIN_GAP_MS.filter(lambda ms: ms <= 20), st.integers(20, 1000),
       st.lists(st.floats(0.0005, 0.05), min_size=1, max_size=8))
def test_a_simulated_group_fires_everything_at_the_gap_within_the_bound(arrivals, fire_batch, min_gap_ms,
                                                                         tick_ms, latencies_s):
    group = SimulatedGroup(arrivals, fire_batch, latencies_s)
    more_due, last_tick_s = False, -math.inf
    for step in range(20_000):
        if not group.arrivals and not group.pending and not group.in_flight:
            break
        more_due, backoff_s = latest_outcome(more_due, group.outcomes)
        group.outcomes.clear()
        assert backoff_s == 0
        view = TickView(leading=True, more_due=more_due,
                        next_due_ms=None if more_due else min(group.pending, default=None),
                        now_ms=group.now_ms(), loop_now_s=group.t, last_tick_s=last_tick_s,
                        in_flight=len(group.in_flight))
        decision = decide(view, tick_ms, min_gap_ms / 1000)
        if isinstance(decision, Propose):
            group.advance(group.t + decision.blocking_s)
            last_tick_s = group.t
            group.propose(latencies_s[len(group.proposals_s) % len(latencies_s)])
            assert len(group.in_flight) <= TICKS_IN_FLIGHT_MAX
        elif isinstance(decision, Sleep):
            group.advance(group.t + decision.seconds)
        else:
            if not group.in_flight and not more_due and group.pending:
                # Asleep with nothing in flight: never past the next due instant (or the gap).
                due_at_s = (min(group.pending) - EPOCH_MS) / 1000
                assert group.t + decision.timeout_s <= max(due_at_s, last_tick_s + min_gap_ms / 1000) + \
                    LOOP_TIMER_GRANULARITY_S + FLOAT_SLACK_S
            group.advance(min(group.t + decision.timeout_s, group.next_wake_up_s(decision.wake_below_ms)))
    else:
        raise AssertionError("the simulated drain never finished")
    assert group.fired == len(arrivals)  # every timer fired (each once: fired ones leave pending)
    gaps = [b - a for a, b in zip(group.proposals_s, group.proposals_s[1:])]
    assert all(gap >= min_gap_ms / 1000 - FLOAT_SLACK_S for gap in gaps), gaps
