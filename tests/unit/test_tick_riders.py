"""Pops riding the leader's tick entry: parking, taking, settling, and the long poll's wait."""

import asyncio

import pytest

from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.long_poll import wait_riding_tick
from queen_raft.raft.errors import GroupUnavailable
from queen_raft.raft.settings import RaftSettings
from queen_raft.raft.tick import TickLoop
from queen_raft.raft.tick_riders import RIDERS_PER_TICK_MAX, TickRiders, settle_riders

POP = {"op": "pop", "queue": "q", "partition": None, "consumerGroup": None, "batch": 10, "autoAck": True}


async def test_one_rider_per_key_and_take_unparks_the_oldest_first():
    riders = TickRiders()
    first = riders.park("a", {"n": 1})
    assert riders.park("a", {"n": 2}) is None  # that key already has its rider
    second = riders.park("b", {"n": 3})
    assert riders.take(1) == [first]
    assert riders.withdraw(first) is False  # taken: its answer comes from the tick
    assert riders.withdraw(second) is True
    assert len(riders) == 0 and riders.take() == []


async def test_take_is_bounded_per_tick():
    riders = TickRiders()
    for key in range(RIDERS_PER_TICK_MAX + 3):
        riders.park(key, {})
    assert len(riders.take()) == RIDERS_PER_TICK_MAX
    assert len(riders) == 3


async def test_settle_gives_each_rider_its_answer_or_the_error_once():
    riders = TickRiders()
    a, b = riders.park("a", {}), riders.park("b", {})
    settle_riders([a, b], [{"messages": [1]}, {"messages": []}], None)
    settle_riders([a, b], None, GroupUnavailable("timeout"))  # already settled: ignored
    assert a.future.result() == {"messages": [1]} and b.future.result() == {"messages": []}
    c = riders.park("c", {})
    settle_riders([c], None, GroupUnavailable("timeout"))
    with pytest.raises(GroupUnavailable):
        c.future.result()


def _tick_loop(propose_entry) -> TickLoop:
    async def propose_tick(command, timeout_s):
        raise AssertionError("with riders the tick goes with them, in one entry")

    return TickLoop("t", RaftSettings(), is_leader=lambda: True, next_due_at=lambda: None,
                    observe_leadership=lambda: None, propose_tick=propose_tick,
                    report_result=lambda result: None, riders=TickRiders(), propose_entry=propose_entry)


async def test_the_tick_entry_carries_the_riders_after_the_tick_and_each_gets_its_answer():
    proposed = []

    async def propose_entry(commands, timeout_s, on_answer=None):
        proposed.append([c["op"] for c in commands])
        return [{"fired": 1, "moreDue": False}, {"messages": ["m"]}]

    loop = _tick_loop(propose_entry)
    rider = loop._riders.park("k", dict(POP))
    [taken] = loop._riders.take()
    result = await loop._propose_tick_with({"op": "tick", "now": 5}, [taken], 1.0)
    assert proposed == [["tick", "pop"]]
    assert result == {"fired": 1, "moreDue": False}
    assert rider.future.result() == {"messages": ["m"]}


async def test_a_tick_that_fails_settles_its_riders_with_the_error():
    async def propose_entry(commands, timeout_s, on_answer=None):
        raise GroupUnavailable("timeout")

    loop = _tick_loop(propose_entry)
    rider = loop._riders.park("k", dict(POP))
    with pytest.raises(GroupUnavailable):
        await loop._propose_tick_with({"op": "tick", "now": 5}, loop._riders.take(), 1.0)
    with pytest.raises(GroupUnavailable):
        rider.future.result()


async def test_an_entry_refused_whole_answers_every_rider_the_refusal():
    refusal = {"error": "internal", "message": "did not decode"}

    async def propose_entry(commands, timeout_s, on_answer=None):
        return refusal

    loop = _tick_loop(propose_entry)
    rider = loop._riders.park("k", dict(POP))
    assert await loop._propose_tick_with({"op": "tick", "now": 5}, loop._riders.take(), 1.0) == refusal
    assert rider.future.result() == refusal


class _LeaderGroup:
    is_leader = True

    def __init__(self) -> None:
        self.tick_riders = TickRiders()


async def test_a_long_poll_whose_pop_was_taken_keeps_its_answer_even_after_its_wait_times_out():
    # The pop may have committed (autoAck settles its messages): dropping the answer would lose them.
    group, signal = _LeaderGroup(), ApplySignal()
    signal.bind(asyncio.get_running_loop())
    waiting = asyncio.ensure_future(wait_riding_tick(group, signal, "k", POP, 0.02, signal.generation))
    await asyncio.sleep(0)
    [rider] = group.tick_riders.take()
    assert rider.command["op"] == "pop" and isinstance(rider.command["leaseId"], str)
    await asyncio.sleep(0.05)  # the wait's timeout passes while the tick is in flight
    assert not waiting.done()
    rider.future.set_result({"messages": ["m"]})
    assert await asyncio.wait_for(waiting, 1.0) == (True, {"messages": ["m"]})


async def test_a_long_poll_not_taken_unparks_and_waits_as_before():
    group, signal = _LeaderGroup(), ApplySignal()
    signal.bind(asyncio.get_running_loop())
    assert await wait_riding_tick(group, signal, "k", POP, 0.02, signal.generation) == (False, None)
    assert len(group.tick_riders) == 0
    seen = signal.generation
    waiting = asyncio.ensure_future(wait_riding_tick(group, signal, "k", POP, 5.0, seen))
    await asyncio.sleep(0)
    signal.notify_threadsafe()
    assert await asyncio.wait_for(waiting, 1.0) == (True, None)
    assert len(group.tick_riders) == 0


async def test_a_follower_never_parks():
    group, signal = _LeaderGroup(), ApplySignal()
    group.is_leader = False
    signal.bind(asyncio.get_running_loop())
    waiting = asyncio.ensure_future(wait_riding_tick(group, signal, "k", POP, 0.05, signal.generation))
    await asyncio.sleep(0)
    assert len(group.tick_riders) == 0
    assert await waiting == (False, None)


async def test_a_cancelled_long_poll_unparks_its_pop():
    group, signal = _LeaderGroup(), ApplySignal()
    signal.bind(asyncio.get_running_loop())
    waiting = asyncio.ensure_future(wait_riding_tick(group, signal, "k", POP, 5.0, signal.generation))
    await asyncio.sleep(0)
    assert len(group.tick_riders) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(group.tick_riders) == 0


async def test_a_tick_task_cancelled_before_it_runs_still_settles_its_riders():
    from queen_raft.raft.tick import Propose, TickRun

    async def propose_entry(commands, timeout_s, on_answer=None):
        raise AssertionError("cancelled before it ran")

    loop = _tick_loop(propose_entry)
    loop.bind(asyncio.get_running_loop())
    rider = loop._riders.park("k", dict(POP))
    run = TickRun(more_due=True)  # a drain: ticks go as tasks, pipelined
    await loop._carry_out(Propose(), run)
    [task] = run.in_flight
    assert rider.command["now"] > 0  # the pop applies at the tick's instant
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(GroupUnavailable):
        rider.future.result()


async def test_a_long_poll_whose_tick_failed_answers_503_unavailable():
    from queen_raft.api.errors import ApiError

    group, signal = _LeaderGroup(), ApplySignal()
    signal.bind(asyncio.get_running_loop())
    waiting = asyncio.ensure_future(wait_riding_tick(group, signal, "k", POP, 5.0, signal.generation))
    await asyncio.sleep(0)
    settle_riders(group.tick_riders.take(), None, GroupUnavailable("timeout"))
    signal.notify_threadsafe()
    with pytest.raises(ApiError) as raised:
        await asyncio.wait_for(waiting, 1.0)
    assert raised.value.status == 503 and raised.value.code == "unavailable"


async def test_outside_a_drain_the_tick_is_proposed_before_the_loop_turns():
    # The stamp and the proposal are not a loop turn apart (a busy loop would delay the fire).
    from queen_raft.raft.tick import Propose, TickRun

    proposed = []

    async def propose_tick(command, timeout_s):
        proposed.append(command["op"])
        return {"fired": 0, "moreDue": False}

    loop = TickLoop("t", RaftSettings(), is_leader=lambda: True, next_due_at=lambda: None,
                    observe_leadership=lambda: None, propose_tick=propose_tick, report_result=lambda result: None)
    loop.bind(asyncio.get_running_loop())
    run = TickRun()
    await loop._carry_out(Propose(), run)
    assert proposed == ["tick"] and not run.in_flight
    assert list(run.outcomes) == [(False, 0.0)]


class _Barrier:
    """A read barrier the test ends: with a value, or with an error."""

    def __init__(self) -> None:
        self.done = asyncio.get_running_loop().create_future()

    async def wait(self):
        return await self.done


async def test_the_first_look_parks_the_pop_and_a_tick_taking_it_answers_the_call():
    from queen_raft.api.long_poll import ride_tick_during

    group, barrier = _LeaderGroup(), _Barrier()
    looking = asyncio.ensure_future(ride_tick_during(group, "k", POP, barrier.wait()))
    await asyncio.sleep(0)
    [rider] = group.tick_riders.take()  # a tick proposed during the barrier's round
    barrier.done.set_result(False)
    await asyncio.sleep(0.01)
    assert not looking.done()  # the taken pop's answer is awaited, not dropped
    rider.future.set_result({"messages": ["m"]})
    assert await asyncio.wait_for(looking, 1.0) == (False, {"messages": ["m"]})


async def test_a_failed_barrier_gives_way_to_a_taken_pop_with_messages_only():
    from queen_raft.api.long_poll import ride_tick_during

    group = _LeaderGroup()
    for answer, outcome in (({"messages": ["m"]}, (None, {"messages": ["m"]})), ({"messages": []}, None)):
        barrier = _Barrier()
        looking = asyncio.ensure_future(ride_tick_during(group, "k", POP, barrier.wait()))
        await asyncio.sleep(0)
        [rider] = group.tick_riders.take()
        rider.future.set_result(answer)
        barrier.done.set_exception(GroupUnavailable("timeout"))
        if outcome is None:
            with pytest.raises(GroupUnavailable):
                await looking
        else:
            assert await looking == outcome
    # Not taken: the barrier's error, and the pop unparked.
    barrier = _Barrier()
    looking = asyncio.ensure_future(ride_tick_during(group, "k", POP, barrier.wait()))
    await asyncio.sleep(0)
    barrier.done.set_exception(GroupUnavailable("timeout"))
    with pytest.raises(GroupUnavailable):
        await looking
    assert len(group.tick_riders) == 0


async def test_riders_get_their_answers_as_the_entry_answers_not_a_loop_turn_later():
    from pysyncobj import FAIL_REASON

    answers = [{"fired": 1, "moreDue": False}, {"messages": ["m"]}]
    resumed = asyncio.Event()

    async def propose_entry(commands, timeout_s, on_answer):
        on_answer(answers, FAIL_REASON.SUCCESS)  # the handoff hands the answer to the loop
        await resumed.wait()  # the tick's coroutine resumes only later
        return answers

    loop = _tick_loop(propose_entry)
    rider = loop._riders.park("k", dict(POP))
    ticking = asyncio.ensure_future(loop._propose_tick_with({"op": "tick", "now": 5}, loop._riders.take(), 1.0))
    assert await asyncio.wait_for(rider.future, 1.0) == {"messages": ["m"]}
    assert not ticking.done()
    resumed.set()
    assert await ticking == answers[0]
