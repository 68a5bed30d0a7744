"""TenantGroup in this process (real sockets on 127.0.0.1, real pysyncobj threads): its status, the
applied hook, backpressure and failing fast. The leader tick's timing rules are in
test_raft_group_tick_timing.py, the handshake guard and the dial map in test_raft_group_links.py.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from queen_raft.raft import MAX_ENTRY_BYTES, EntryTooLarge, GroupUnavailable, RaftSettings
from queen_raft.raft.group_api import GroupStatus
from lone_group_fixture import groups, record_ticks, started, wait_until  # noqa: F401 (groups is a fixture)
from port_blocks import worker_port

pytestmark = pytest.mark.integration


async def test_the_status_answers_the_fields_of_group_status(groups):
    group = await started(groups(RaftSettings()))
    status = group.status()
    assert set(status) == set(GroupStatus.__annotations__)
    assert status["role"] == "leader" and status["leader"] == group.self_addr
    await group.stop()


async def test_every_apply_and_tick_raises_on_applied_and_a_failing_hook_changes_nothing(groups):
    group = await started(groups(RaftSettings(tick_ms=1000)))
    applied = []
    group.on_applied = lambda: applied.append(threading.current_thread() is not threading.main_thread())
    await group.propose({"op": "set", "key": "k", "value": 1})
    assert applied and all(applied)  # on pysyncobj's tick thread, after the proposal's apply
    before = len(applied)
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "a", "delayMs": 10})
    await wait_until(lambda: ticks, 2.0)
    await wait_until(lambda: len(applied) >= before + 2, 2.0)  # the schedule's apply, the tick's

    def failing_hook():
        raise RuntimeError("hook failed on purpose")

    group.on_applied = failing_hook
    assert (await group.propose({"op": "set", "key": "k", "value": 2}))["ok"] is True
    assert await group.read(lambda s: s.values) == {"k": 2}
    await group.stop()


async def test_tick_ms_zero_never_fires(groups):
    group = await started(groups(RaftSettings(tick_ms=0)))
    await group.propose({"op": "timer", "key": "a", "delayMs": 0})
    await asyncio.sleep(0.3)
    assert group.ticks_proposed == 0
    assert await group.read(lambda s: s.fired) == []
    await group.stop()


async def test_a_raising_apply_does_not_wedge_the_group(groups):
    group = await started(groups(RaftSettings()))
    assert (await group.propose({"op": "boom"}))["error"] == "internal"
    assert (await group.propose({"op": "set", "key": "k", "value": 1}))["ok"] is True
    assert await group.read(lambda s: s.values) == {"k": 1}


async def test_an_entry_over_the_size_bound_is_refused_before_proposing(groups):
    group = await started(groups(RaftSettings()))
    # A new leader's own first entry may still be applying once it leads: let it land first.
    # pysyncobj calls an entry's callback before it bumps its applied index, so also wait until
    # the applied index has caught up with the commit index before taking it as the baseline.
    await group.read(lambda state: None)
    await wait_until(lambda: group.status()["appliedIndex"] == group.status()["commitIndex"], 2.0)
    applied_before = group.status()["appliedIndex"]
    with pytest.raises(EntryTooLarge):
        await group.propose({"op": "set", "key": "k", "value": b"x" * (MAX_ENTRY_BYTES + 1)})
    await asyncio.sleep(0.2)  # an entry proposed by mistake would have committed by now
    assert group.status()["commitIndex"] == applied_before
    assert group.status()["appliedIndex"] == applied_before


async def test_a_write_not_committed_in_time_answers_timeout(groups, monkeypatch):
    group = await started(groups(RaftSettings(commit_timeout_ms=150)))
    # The entry goes nowhere: pysyncobj never answers this call (as when a commit stalls).
    monkeypatch.setattr(group._consumer, "apply", lambda entry, callback: None)
    started_at = time.monotonic()
    with pytest.raises(GroupUnavailable) as caught:
        await group.propose({"op": "set", "key": "k", "value": 1})
    assert caught.value.reason == "timeout"
    assert 0.14 <= time.monotonic() - started_at < 1.0
    assert group._in_flight == 0
    monkeypatch.undo()
    assert (await group.propose({"op": "set", "key": "after", "value": 1}))["ok"] is True


async def test_calls_beyond_the_in_flight_bound_are_refused_as_busy(groups):
    group = await started(groups(RaftSettings(max_in_flight=2)))
    outcomes = await asyncio.gather(
        *[group.propose({"op": "set", "key": f"k{i}", "value": i}) for i in range(10)], return_exceptions=True
    )
    busy = [o for o in outcomes if isinstance(o, GroupUnavailable)]
    committed = [o for o in outcomes if isinstance(o, dict)]
    assert len(committed) == 2 and len(busy) == 8
    assert all(o.reason == "busy" and o.retry_after_s > 0 for o in busy)
    assert (await group.propose({"op": "set", "key": "after", "value": 1}))["ok"] is True


async def test_without_a_leader_a_write_fails_fast_with_no_leader(groups):
    # Two peers that do not exist: no quorum, no leader, ever.
    group = groups(RaftSettings(), peers=[f"127.0.0.1:{worker_port(17598)}", f"127.0.0.1:{worker_port(17599)}"])
    started_at = time.monotonic()
    with pytest.raises(GroupUnavailable) as caught:
        await group.propose({"op": "set", "key": "k", "value": 1})
    assert caught.value.reason == "no_leader" and caught.value.retry_after_s == 1.0
    assert time.monotonic() - started_at < 0.5
    assert group.status()["role"] in ("follower", "candidate") and group.status()["leader"] is None
