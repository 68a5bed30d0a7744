"""The leader tick at the minimum gap, on one in-process TenantGroup (real socket on 127.0.0.1, real
pysyncobj threads): during a drain, no two ticks are stamped closer than min_gap_ms
(docs/spec.md section 2), each tick is its own entry firing at most one fire batch, and the rest of each gap is
waited out through split_gap_wait (tests/unit/test_raft_tick_gap.py), not a plain asyncio.sleep
that wakes up to a ms late.

How close to the gap the ticks follow each other depends on the CPU the test gets (on two busy
cores the median stamp gap was 7-8 ms against 5 on a quiet machine), so it is measured by
`bench/due_million.py` (tick spacing), not asserted here.

The node clock is the loop's monotonic clock here (whole ms), so a stamp difference is the
difference of the loop's decision instants rounded down: the gap can be checked exactly.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster_fixture import pick_port_runs
from queen_raft import clock
from queen_raft.config import Settings
from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft import tick as tick_module
from queen_raft.raft.tick import TICKS_IN_FLIGHT_MAX
from raft_test_state import TimerLogState

pytestmark = pytest.mark.integration

# A lone node elects itself after one election timeout (0.2-0.6 s).
SELF_ELECTION_WAIT_S = 5.0
DRAIN_WAIT_S = 10.0
MIN_GAP_MS = 5
FIRE_BATCH = 10
TIMERS = 400  # 40 firing ticks at the gap: ~0.2 s
# A backlog that grows the batch 10, 20, 40, 80 and then fires 80 per tick, and a second, smaller
# one after the first has cleared.
GROWN_FIRE_BATCH_MAX = 80
GROWN_BACKLOG = 2_000
SECOND_BACKLOG = 30


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


@pytest.fixture
def monotonic_node_clock(monkeypatch):
    # Wall and monotonic clocks may disagree by a slew; the test wants the stamps on the clock the
    # tick loop measures its gap with. Shifted to a plausible epoch instant, whole ms like wall_ms.
    offset_ms = clock.wall_ms() - time.monotonic_ns() // 1_000_000
    monkeypatch.setattr(clock, "wall_ms", lambda: time.monotonic_ns() // 1_000_000 + offset_ms)


async def test_drain_ticks_are_never_closer_than_the_gap_nor_batched(tmp_path, monotonic_node_clock, monkeypatch):
    waits: list[tuple[float, float]] = []  # (loop part, blocking part) of each wait the loop made
    split = tick_module.split_gap_wait

    def recorded_split(gap_left_s: float) -> tuple[float, float]:
        waits.append(split(gap_left_s))
        return waits[-1]

    monkeypatch.setattr(tick_module, "split_gap_wait", recorded_split)
    (port,) = pick_port_runs(1, 1)
    addr = f"127.0.0.1:{port}"
    # The batch held at FIRE_BATCH (no backlog growth): the count of firing ticks is then exact.
    settings = RaftSettings(tick_ms=1000, min_gap_ms=MIN_GAP_MS, fire_batch_max=FIRE_BATCH,
                            fire_policy=Settings(timer_fire_batch=FIRE_BATCH).fire_policy())
    group = TenantGroup("t", addr, [addr], str(tmp_path), settings, TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        await wait_until(lambda: group.is_leader, SELF_ELECTION_WAIT_S)
        ticks: list[dict] = []
        group.on_tick_result = lambda result, lags: ticks.append(result)
        keys = [f"k{i:04d}" for i in range(TIMERS)]
        await group.propose({"op": "timers", "keys": keys, "delayMs": 50})
        await wait_until(lambda: sum(r["fired"] for r in ticks) == TIMERS, DRAIN_WAIT_S)
        await wait_until(lambda: len(ticks) == group.ticks_proposed, DRAIN_WAIT_S)  # the pipelined tail
        await group.stop()

        fired = group.peek_local(lambda s: [f[0] for f in s.fired])
        assert sorted(fired) == keys  # every timer once, none twice
        # One tick, one entry, one fire batch at most: never two ticks' fires in one entry.
        assert all(r["fired"] <= FIRE_BATCH for r in ticks)
        firing = [r for r in ticks if r["fired"]]
        assert len(firing) == TIMERS // FIRE_BATCH
        assert len(ticks) <= len(firing) + TICKS_IN_FLIGHT_MAX - 1
        # Log order is proposal order, so consecutive results are consecutive proposals.
        stamps = [r["now"] for r in ticks]
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        assert min(gaps) >= MIN_GAP_MS, gaps
        # Gaps were waited out, in whole ms on the loop (a drain tick's result usually arrives
        # well inside the gap).
        assert any(loop_wait_s > 0 for loop_wait_s, _ in waits), waits
    finally:
        group.destroy()


async def test_a_backlog_doubles_the_fire_batch_up_to_the_ceiling_and_a_new_one_starts_at_the_base(tmp_path):
    """Each tick that fired its whole batch with more due doubles the next one's, up to
    fire_batch_max; the batch travels in the tick command (the test state answers what it got)."""
    (port,) = pick_port_runs(1, 1)
    addr = f"127.0.0.1:{port}"
    settings = RaftSettings(tick_ms=1000, min_gap_ms=MIN_GAP_MS, fire_batch_max=GROWN_FIRE_BATCH_MAX,
                            fire_policy=Settings(timer_fire_batch=FIRE_BATCH).fire_policy())
    group = TenantGroup("t", addr, [addr], str(tmp_path), settings, TimerLogState, TimerLogState.restore)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        await wait_until(lambda: group.is_leader, SELF_ELECTION_WAIT_S)
        ticks: list[dict] = []
        group.on_tick_result = lambda result, lags: ticks.append(result)
        for backlog, size in enumerate((GROWN_BACKLOG, SECOND_BACKLOG)):
            before = len(ticks)
            keys = [f"b{backlog}-{i:05d}" for i in range(size)]
            await group.propose({"op": "timers", "keys": keys, "delayMs": 50})
            await wait_until(lambda: sum(r["fired"] for r in ticks[before:]) == size, DRAIN_WAIT_S)
            await wait_until(lambda: len(ticks) == group.ticks_proposed, DRAIN_WAIT_S)
            batches = [r["fireBatch"] for r in ticks[before:] if r["fired"]]
            assert batches[0] == FIRE_BATCH, batches  # every backlog starts at the base batch
            assert max(batches) == GROWN_FIRE_BATCH_MAX or backlog == 1, batches
            assert all(r["fired"] <= r["fireBatch"] <= GROWN_FIRE_BATCH_MAX for r in ticks[before:])
            # Never more than a doubling from one firing tick to the next, never a shrink mid-drain.
            assert all(b <= 2 * a and b >= a for a, b in zip(batches, batches[1:])), batches
        fired = group.peek_local(lambda s: [f[0] for f in s.fired])
        assert len(fired) == len(set(fired)) == GROWN_BACKLOG + SECOND_BACKLOG
    finally:
        group.destroy()
