"""TenantGroup in this process (real sockets on 127.0.0.1, real pysyncobj threads): the leader tick's
timing rules (fires at the instant, woken by an earlier timer, the minimum gap, pipelined drains, a
refused tick retried at the cap) and stop ending the tick loop.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from queen_raft.config import Settings
from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.tick import LEADERSHIP_WATCH_S, TICKS_IN_FLIGHT_MAX
from raft_test_state import TimerLogState
from lone_group_fixture import _PORTS, groups, record_ticks, started, wait_until  # noqa: F401 (groups is a fixture)

pytestmark = pytest.mark.integration


async def test_a_sparse_timer_fires_at_its_instant_not_on_a_grid(groups):
    # With a 1 s cap, a loop that polled on a grid would fire up to ~900 ms late.
    group = await started(groups(RaftSettings(tick_ms=1000)))
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "a", "delayMs": 100})
    await wait_until(lambda: ticks, 2.0)
    (_, result), = ticks
    assert result["fired"] == 1
    assert result["lagsMs"][0] < 100
    await group.stop()


async def test_an_earlier_timer_wakes_the_sleeping_tick(groups):
    group = await started(groups(RaftSettings(tick_ms=5000)))
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "late", "delayMs": 3000})
    await asyncio.sleep(0.05)  # the loop now sleeps toward "late", capped at 5 s
    await group.propose({"op": "timer", "key": "early", "delayMs": 100})
    await wait_until(lambda: ticks, 2.0)
    (_, result), = ticks
    assert result["fired"] == 1 and result["lagsMs"][0] < 200  # not ~2.9 s later with "late"
    assert await group.read(lambda s: [f[0] for f in s.fired]) == ["early"]
    await group.stop()


async def test_more_due_goes_again_at_the_minimum_gap_not_the_cap(groups):
    # A fixed batch of 10 (no backlog growth, fire_batch_max = 10): the firing ticks are exact.
    group = await started(groups(RaftSettings(tick_ms=1000, min_gap_ms=20, fire_batch_max=10,
                                              fire_policy=Settings(timer_fire_batch=10).fire_policy())))
    ticks = record_ticks(group)
    await group.propose({"op": "timers", "keys": [f"k{i:02d}" for i in range(35)], "delayMs": 100})
    await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 35, 3.0)
    await wait_until(lambda: len(ticks) == group.ticks_proposed, 3.0)  # pipelined ticks firing nothing
    firing = [r for _, r in ticks if r["fired"]]
    assert [r["fired"] for r in firing] == [10, 10, 10, 5]
    assert [r["moreDue"] for r in firing] == [True, True, True, False]
    # Proposal instants (each tick's stamp, wall ms): >= 20 ms apart (1 ms for rounding to whole
    # ms), and the next tick goes as soon as the gap allows, not after the 1 s cap.
    stamps = [r["now"] for _, r in ticks]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert all(19 <= gap < 500 for gap in gaps), gaps
    # A tick pipelined during the drain may find nothing left: at most TICKS_IN_FLIGHT_MAX - 1.
    assert 4 <= group.ticks_proposed == len(ticks) <= 4 + TICKS_IN_FLIGHT_MAX - 1
    await group.stop()


class SlowTickState(TimerLogState):
    """Applies each tick slowly (longer than the minimum gap), as a large fire batch does."""

    TICK_APPLY_S = 0.03

    def apply(self, command):
        if command["op"] == "tick":
            time.sleep(self.TICK_APPLY_S)
        return super().apply(command)


async def test_a_drain_pipelines_ticks_at_the_gap_and_fires_each_timer_once(tmp_path):
    # Each tick takes 30 ms to apply and the gap is 5 ms: one tick at a time would space them
    # ~30 ms apart; pipelined, proposals follow at the gap while earlier ticks are still applying.
    port = next(_PORTS)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path), RaftSettings(tick_ms=1000, min_gap_ms=5, fire_batch_max=10,
                                                                     fire_policy=Settings(timer_fire_batch=10).fire_policy()),
                        SlowTickState, SlowTickState.restore)
    try:
        await started(group)
        ticks = record_ticks(group)
        proposed_at = []
        real_propose = group._propose

        async def observed_propose(command, timeout_s, **options):
            if command["op"] == "tick":
                proposed_at.append(time.monotonic())
            return await real_propose(command, timeout_s, **options)

        group._propose = observed_propose
        keys = [f"k{i:03d}" for i in range(100)]
        await group.propose({"op": "timers", "keys": keys, "delayMs": 50})
        await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 100, 10.0)
        await wait_until(lambda: len(ticks) == group.ticks_proposed, 5.0)  # the pipelined tail too
        fired = await group.read(lambda s: [f[0] for f in s.fired])
        assert sorted(fired) == keys  # every timer once, none twice
        gaps = [b - a for a, b in zip(proposed_at, proposed_at[1:])]
        assert all(gap >= 0.004 for gap in gaps), gaps  # the minimum gap holds (1 ms rounding)
        # Pipelined: some proposals went out before the previous tick (30 ms to apply) was done.
        assert sum(gap < SlowTickState.TICK_APPLY_S for gap in gaps) >= 3, gaps
        assert group.ticks_proposed <= 10 + TICKS_IN_FLIGHT_MAX - 1 + 1
        await group.stop()
    finally:
        group.destroy()


async def test_timers_coming_due_one_after_another_keep_firing(groups):
    # A stream of due instants ~1 ms apart: a tick often ends (moreDue false) when the next timer
    # is already due. The loop must propose again at once, never wait on the tick just finished.
    group = await started(groups(RaftSettings(tick_ms=5000, min_gap_ms=1)))
    ticks = record_ticks(group)
    for i in range(150):
        await group.propose({"op": "timer", "key": f"k{i:03d}", "delayMs": 100})
    last_due = await group.read(lambda s: max(s.timers.values(), default=0))
    await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 150, 3.0)
    fired = await group.read(lambda s: s.fired)
    assert sorted(f[0] for f in fired) == [f"k{i:03d}" for i in range(150)]
    # Every fire within a few gaps of its instant, not after the 5 s cap (or any 1 s backstop).
    assert max(f[2] - f[1] for f in fired) < 500, max(f[2] - f[1] for f in fired)
    assert last_due > 0
    await group.stop()


class TickRefusingState(TimerLogState):
    """A state whose tick answers an error: the loop must back off, not spin at the minimum gap."""

    def apply(self, command):
        if command["op"] == "tick":
            self.clock = max(self.clock, command["now"])
            return {"error": "internal", "message": "tick refused on purpose"}
        return super().apply(command)


async def test_a_tick_the_state_refuses_is_retried_at_the_cap_not_the_gap(tmp_path):
    port = next(_PORTS)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path), RaftSettings(tick_ms=100, min_gap_ms=1),
                        TickRefusingState, TickRefusingState.restore)
    try:
        await started(group)
        await group.propose({"op": "timer", "key": "a", "delayMs": 0})
        await asyncio.sleep(0.5)
        # ~5 at a 100 ms cap; a loop retrying at the 1 ms gap would propose hundreds.
        assert 1 <= group.ticks_proposed <= 8
        await group.stop()
    finally:
        group.destroy()


async def test_stop_ends_the_tick_loop_even_when_a_cancellation_is_swallowed(groups):
    # Python 3.11's asyncio.wait_for can swallow a cancellation (CPython gh-86296); a tick loop
    # that lost it kept ticking and stop() waited forever (a 300 s CI hang). Swallow every
    # cancellation the loop's waits receive: stop() must still end it, promptly.
    group = await started(groups(RaftSettings(tick_ms=200)))
    swallowed = []

    async def swallowing_wait(timeout_s: float) -> None:
        try:
            await asyncio.sleep(timeout_s)  # deaf to the wake event, like a wait past its wake-up
        except asyncio.CancelledError:
            swallowed.append(timeout_s)

    group._tick_loop._wait_for_wake = swallowing_wait
    # Past the first wait (no timer pending: up to the leadership watch): the loop now sleeps in
    # swallowing_wait.
    await asyncio.sleep(LEADERSHIP_WATCH_S + 0.3)
    started_at = time.monotonic()
    await asyncio.wait_for(group.stop(), 3.0)
    assert swallowed, "the test did not exercise a swallowed cancellation"
    assert time.monotonic() - started_at < 1.0
    assert group._tick_loop.task is None
