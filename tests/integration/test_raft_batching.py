"""Proposal batching on three in-process TenantGroups (real sockets on 127.0.0.1, real pysyncobj
threads): a mixed burst through the leader and a follower is coalesced into batch entries, every
caller gets its own result, single-command entries (the pre-batching format) still apply, and the
replicas agree byte for byte, also after a replica replays its journal on restart.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from pysyncobj import FAIL_REASON

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.replicated_state import encode_command
from raft_test_state import TimerLogState
from port_blocks import worker_port

pytestmark = pytest.mark.integration

# A port block no other test uses (group_inprocess counts up from 17500, tenant_state 17600-17650,
# follower_burst 17800).
_PORTS = itertools.count(worker_port(17900))
ELECTION_WAIT_S = 5.0
CONVERGE_WAIT_S = 10.0
# Enough concurrent calls per node that many arrive while entries are in flight.
CALLS_PER_NODE = 120


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def make_member(tmp_path, addrs: list[str], index: int) -> TenantGroup:
    addr = addrs[index]
    port = addr.rsplit(":", 1)[1]
    # tick_ms 20: ticks fire the short timers below while the burst runs, inside batches too.
    return TenantGroup("t", addr, addrs, str(tmp_path / port), RaftSettings(tick_ms=20, min_gap_ms=1),
                       TimerLogState, TimerLogState.restore)


def mixed_command(node: int, i: int) -> dict:
    kind = i % 5
    if kind == 3:
        return {"op": "boom"}  # raises inside apply: an internal error for this caller only
    if kind == 4:
        return {"op": "no-such-op"}  # refused by the state
    if kind == 2:
        return {"op": "timer", "key": f"t{node}-{i}", "delayMs": 5}
    return {"op": "set", "key": f"k{node}-{i}", "value": i}


async def propose_single_entry(group: TenantGroup, command: dict) -> tuple:
    """The pre-batching path: one command, one plain entry, straight to pysyncobj."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    command = {**command, "now": int(time.time() * 1000)}
    group._consumer.apply(encode_command(command),
                          callback=lambda result, error: loop.call_soon_threadsafe(future.set_result, (result, error)))
    return await asyncio.wait_for(future, 5.0)


def snapshots(members: list[TenantGroup]) -> list[bytes]:
    return [m.peek_local(lambda state: state.snapshot()) for m in members]


async def converged(members: list[TenantGroup]) -> None:
    leader = next(m for m in members if m.is_leader)
    target = leader.status()["commitIndex"]
    await wait_until(lambda: all(m.status()["appliedIndex"] >= target for m in members), CONVERGE_WAIT_S)
    # pysyncobj bumps its applied index after the entry's callback: let the last apply finish.
    await wait_until(lambda: len(set(snapshots(members))) == 1, CONVERGE_WAIT_S)


async def test_a_mixed_burst_batches_and_every_replica_applies_it_identically(tmp_path):
    addrs = [f"127.0.0.1:{next(_PORTS)}" for _ in range(3)]
    members = [make_member(tmp_path, addrs, i) for i in range(3)]
    loop = asyncio.get_running_loop()
    try:
        for member in members:
            member.start_tick_loop(loop)
        await wait_until(lambda: sum(m.is_leader for m in members) == 1 and all(m.leader_addr() for m in members),
                         ELECTION_WAIT_S)
        leader = next(m for m in members if m.is_leader)
        follower = next(m for m in members if not m.is_leader)
        # An old-format entry first, from the leader and from a follower.
        for node, group in enumerate((leader, follower)):
            result, error = await propose_single_entry(group, {"op": "set", "key": f"old{node}", "value": node})
            assert error == FAIL_REASON.SUCCESS and result["ok"] is True

        calls = [(node, i, group.propose(mixed_command(node, i)))
                 for node, group in enumerate((leader, follower)) for i in range(CALLS_PER_NODE)]
        answers = await asyncio.gather(*[call for _, _, call in calls])

        applied_numbers = []
        for (node, i, _), answer in zip(calls, answers):
            kind = i % 5
            if kind == 3:
                assert answer["error"] == "internal" and "boom" in answer["message"], answer
            elif kind == 4:
                assert answer["error"] == "bad_request", answer
            elif kind == 2:
                assert answer["ok"] is True and "deliverAt" in answer, answer
            else:
                assert answer["ok"] is True, answer
                applied_numbers.append(answer["applied"])
        # Each caller got its own command's answer, not a neighbour's.
        assert len(set(applied_numbers)) == len(applied_numbers)
        # Coalesced on both nodes: the follower forwarded batches, not one message per command.
        for group in (leader, follower):
            proposals = group.status()["proposals"]
            assert proposals["entries"] < proposals["commands"], proposals

        await wait_until(lambda: len(leader.peek_local(lambda s: s.fired)) == 2 * CALLS_PER_NODE // 5,
                         CONVERGE_WAIT_S)
        await converged(members)
        values = leader.peek_local(lambda s: dict(s.values))
        assert values["old0"] == 0 and values["old1"] == 1
        assert sum(1 for key in values if key.startswith("k")) == 2 * 2 * CALLS_PER_NODE // 5

        # A replica that replays its journal (single and batch entries) ends up identical too.
        index = members.index(follower)
        await follower.stop()
        follower.destroy()
        members[index] = make_member(tmp_path, addrs, index)
        members[index].start_tick_loop(loop)
        await leader.propose({"op": "set", "key": "after-restart", "value": 1})
        await converged(members)
        assert members[index].peek_local(lambda s: s.values.get("after-restart")) == 1
    finally:
        for member in members:
            await member.stop()
            member.destroy()


async def test_ticks_go_alone_at_once_even_while_the_batcher_holds_everything(tmp_path):
    addr = f"127.0.0.1:{next(_PORTS)}"
    group = TenantGroup("t", addr, [addr], str(tmp_path), RaftSettings(tick_ms=1000, min_gap_ms=1),
                        TimerLogState, TimerLogState.restore)
    loop = asyncio.get_running_loop()
    try:
        group.start_tick_loop(loop)
        await wait_until(lambda: group.is_leader, ELECTION_WAIT_S)
        await group.propose({"op": "timer", "key": "due", "delayMs": 200})
        ticks = []
        group.on_tick_result = lambda result, lags: ticks.append(result)
        # From now on the batcher holds every command forever (as behind entries that never commit).
        held = []
        group._batcher.add = lambda entry, future, timeout_s: held.append(entry)
        write = loop.create_task(group.propose({"op": "set", "key": "k", "value": 1}))
        await wait_until(lambda: held, 1.0)
        await wait_until(lambda: ticks, 2.0)  # the tick did not go through the batcher
        assert ticks[0]["fired"] == 1
        assert [f[0] for f in group.peek_local(lambda s: s.fired)] == ["due"]
        assert not write.done()
        write.cancel()
        await group.stop()
    finally:
        group.destroy()
