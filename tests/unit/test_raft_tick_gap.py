"""The leader tick's wait for the minimum gap (queen_raft.raft.tick.split_gap_wait).

asyncio's epoll selector rounds every timeout up to whole ms, so a plain asyncio.sleep(gap_left)
woke 0-1 ms late (0.8 ms p50 between drain ticks), 14 % of the default drain rate at a 5 ms gap.
The split keeps the loop's part to whole ms that the selector cannot round past the end of the
gap, and leaves only a sub-ms rest to block out (time.sleep never returns early).
"""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from queen_raft.raft.tick import LOOP_TIMER_GRANULARITY_S, split_gap_wait

# A gap left anywhere from nothing to a few ticks' worth of the largest sensible min_gap_ms.
GAPS_S = st.floats(min_value=-0.01, max_value=2.0, allow_nan=False, allow_infinity=False)


def epoll_selector_timeout_s(timeout_s: float) -> float:
    """What selectors.EpollSelector.select makes of the timeout asyncio hands it (CPython 3.11):
    rounded up to whole ms. asyncio computes that timeout a moment after the sleep began, so it is
    a hair below the sleep's own length."""
    return math.ceil(timeout_s * 1e3) * 1e-3


@given(GAPS_S)
def test_the_loop_part_is_never_rounded_past_the_end_of_the_gap(gap_left_s):
    loop_wait_s, _ = split_gap_wait(gap_left_s)
    if loop_wait_s > 0:
        as_the_selector_waits_s = epoll_selector_timeout_s(loop_wait_s * (1 - 1e-9))
        assert as_the_selector_waits_s <= gap_left_s + 1e-9


@given(GAPS_S)
def test_once_the_loop_part_is_over_less_than_one_step_is_left(gap_left_s):
    loop_wait_s, blocking_wait_s = split_gap_wait(gap_left_s)
    if gap_left_s <= 0:
        assert (loop_wait_s, blocking_wait_s) == (0.0, 0.0)
    elif loop_wait_s > 0:
        # One of the two at a time: after the loop part the loop looks at the gap again.
        assert blocking_wait_s == 0.0
        assert 0 <= gap_left_s - loop_wait_s < LOOP_TIMER_GRANULARITY_S + 1e-12
    else:
        # Only a sub-step rest is ever blocked out, and all of it: the tick goes right after.
        assert blocking_wait_s == gap_left_s < LOOP_TIMER_GRANULARITY_S


def test_the_default_gap_is_slept_on_the_loop_and_a_rest_under_a_ms_is_blocked_out():
    assert split_gap_wait(0.005) == (0.005, 0.0)
    loop_wait_s, blocking_wait_s = split_gap_wait(0.0047)
    assert math.isclose(loop_wait_s, 0.004) and blocking_wait_s == 0.0
    assert split_gap_wait(0.0007) == (0.0, 0.0007)
    assert split_gap_wait(0.0) == (0.0, 0.0)
    assert split_gap_wait(-0.003) == (0.0, 0.0)
