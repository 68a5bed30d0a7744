"""A parked pop rides the leader's next tick: one entry, applied right after the tick's fires."""

from __future__ import annotations

import asyncio

import pytest

from queen_raft.raft import RaftSettings
from lone_group_fixture import groups, record_ticks, started, wait_until  # noqa: F401  (groups is a fixture)

pytestmark = pytest.mark.integration


async def test_a_parked_command_is_applied_in_the_tick_entry_right_after_the_tick(groups):  # noqa: F811
    group = await started(groups(RaftSettings(tick_ms=1000)))
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "a", "delayMs": 150})
    applied_before = await group.read(lambda state: state.applied)
    # The test state has no pop: a `set` stands for it (its answer says where it applied).
    rider = group.tick_riders.park("k", {"op": "set", "key": "rode", "value": 1})
    answer = await asyncio.wait_for(rider.future, 5.0)
    await wait_until(lambda: ticks, 2.0)
    (_, tick), = ticks
    assert tick["fired"] == 1
    # The tick applied first, then the parked command, at the tick's instant: one entry, no other
    # entry between them.
    assert answer == {"ok": True, "applied": applied_before + 2, "now": tick["now"]}
    assert len(group.tick_riders) == 0
    await group.stop()
