"""A member that restarts holds its candidacy until it has heard the leader (or reached every other
member, or waited out the hold): a healthy leader that has not reached it yet keeps its term.

The race it closes: a start whose load outlasts the peers' connection timeout, after which the
member reaches one follower before the leader's redial gets through. Here that order is made
certain: the link between the restarting member and the leader stays cut (its dialler is pointed
at a port nobody listens on) for several election timeouts after the load ends, while the link to
the other follower is up. Without the hold the member calls an election at term+1, which the
follower grants, deposing the leader.

Liveness: a group whose leader is killed during a member's hold elects at once; a group restarted
whole elects; two members restarted without the third elect within the hold's bound.
Three TenantGroups in this process on real sockets (see test_raft_slow_restart.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
from inprocess_groups import leader_of, slow_restore, three_members, wait_until

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.settings import CONNECTION_TIMEOUT_S

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings(log_compaction_min_entries=5)
# Longer than the peers' connection timeout, as the load of a million timers can be.
SLOW_RESTORE_S = CONNECTION_TIMEOUT_S + 0.5
# How long the leader's link stays cut after the load: several election timeouts, well inside the hold.
CUT_AFTER_LOAD_S = 3 * SETTINGS.election_max_s
# The longest a restarted member waits before it stands with no leader heard (snapshot_guard.py).
HOLD_BOUND_S = CONNECTION_TIMEOUT_S + SETTINGS.connection_retry_s
DEADLINE_S = 10.0
# Room for this shared machine: ticks, dials and loads run late under load from other work.
SLACK_S = 3.0


def terms(groups) -> set[int]:
    return {group.status()["term"] for group in groups}


def connected_to(group: TenantGroup) -> set[str]:
    return {node.address for node in group._syncobj._SyncObj__connectedNodes}


def loaded(group: TenantGroup) -> bool:
    return group._syncobj._start_load_done.is_set()


@pytest.fixture
def dead_port():
    """An address that refuses every connection: bound, never listening, so nobody else takes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
async def cluster(tmp_path):
    async with three_members(tmp_path, SETTINGS) as members:
        yield members


async def started_with_snapshots(cluster) -> TenantGroup:
    """The three members up, a leader, twenty entries, and a snapshot on every member."""
    addrs, live, start, _ = cluster
    for addr in addrs:
        start(addr)
    await wait_until(lambda: leader_of(live.values()) is not None, "a leader")
    leader = leader_of(live.values())
    for i in range(20):
        await leader.propose({"op": "set", "key": f"k{i}", "value": i})
    committed = leader.status()["commitIndex"]
    await wait_until(lambda: all(g.status()["appliedIndex"] >= committed for g in live.values()), "every member applied")
    for group in live.values():
        group.force_log_compaction()
    await wait_until(lambda: all(os.path.exists(g.full_dump_file) for g in live.values()), "every snapshot")
    return leader


async def restart_cut_from_leader(follower: TenantGroup, leader: TenantGroup, dead: str, cluster) -> TenantGroup:
    """Restart `follower` slowly with its link to `leader` cut (whichever of the two dials), and
    return it once its load is done."""
    _, _, start, stop = cluster
    leader._transport.dial_map[follower.self_addr] = dead  # used if the leader is the dialler
    await stop(follower.self_addr)
    restarted = start(follower.self_addr, restore=slow_restore(SLOW_RESTORE_S), dial_map={leader.self_addr: dead})
    await wait_until(lambda: loaded(restarted), "the restarted member's load", SLOW_RESTORE_S + DEADLINE_S)
    return restarted


def heal(restarted: TenantGroup, leader: TenantGroup) -> None:
    leader._transport.dial_map.pop(restarted.self_addr, None)
    restarted._transport.dial_map.pop(leader.self_addr, None)


@pytest.mark.parametrize("which", ["lower", "higher"])
async def test_a_restarted_member_that_has_not_heard_the_leader_does_not_depose_it(cluster, dead_port, which):
    _, live, _, _ = cluster
    leader = await started_with_snapshots(cluster)
    term = leader.status()["term"]
    followers = sorted((g for g in live.values() if g is not leader), key=lambda g: g.self_addr)
    follower = followers[0] if which == "lower" else followers[1]
    other = followers[1] if which == "lower" else followers[0]

    restarted = await restart_cut_from_leader(follower, leader, dead_port, cluster)
    # The race's order: the other follower reached, the leader not.
    await wait_until(lambda: connected_to(restarted) == {other.self_addr}, "the restarted member to reach the other follower")
    cut_until = time.monotonic() + CUT_AFTER_LOAD_S
    while time.monotonic() < cut_until:
        assert terms(live.values()) == {term}, "a member moved the term while the leader was healthy"
        assert leader.is_leader and other.leader_addr() == leader.self_addr
        await asyncio.sleep(0.01)
    heal(restarted, leader)
    await wait_until(lambda: restarted.leader_addr() == leader.self_addr, "the restarted member to hear the leader")
    watch_until = time.monotonic() + 3 * SETTINGS.election_max_s
    while time.monotonic() < watch_until:
        assert terms(live.values()) == {term} and leader.is_leader
        await asyncio.sleep(0.01)
    assert restarted.peek_local(lambda state: state.values) == {f"k{i}": i for i in range(20)}


async def test_a_leader_killed_while_a_restarted_member_holds_is_replaced_promptly(cluster, dead_port):
    _, live, _, stop = cluster
    leader = await started_with_snapshots(cluster)
    term = leader.status()["term"]
    follower = min((g for g in live.values() if g is not leader), key=lambda g: g.self_addr)
    await restart_cut_from_leader(follower, leader, dead_port, cluster)
    killed_at = time.monotonic()
    await stop(leader.self_addr)
    # The member that did not restart stands after one election timeout; the restarted one votes.
    await wait_until(lambda: leader_of(live.values()) is not None, "a new leader",
                     SETTINGS.election_max_s + SLACK_S)
    assert time.monotonic() - killed_at < SETTINGS.election_max_s + SLACK_S
    assert leader_of(live.values()).status()["term"] > term


async def test_a_group_restarted_whole_elects_a_leader(cluster):
    addrs, live, start, stop = cluster
    await started_with_snapshots(cluster)
    for addr in addrs:
        await stop(addr)
    for addr in addrs:
        start(addr, restore=slow_restore(SLOW_RESTORE_S))
    await wait_until(lambda: all(loaded(g) for g in live.values()), "every load", SLOW_RESTORE_S + DEADLINE_S)
    loaded_at = time.monotonic()
    # Every member reaches the other two, so none waits out the hold.
    await wait_until(lambda: leader_of(live.values()) is not None, "a leader", SETTINGS.election_max_s + SLACK_S)
    assert time.monotonic() - loaded_at < SETTINGS.election_max_s + SLACK_S


async def test_two_members_restarted_without_the_third_elect_within_the_hold(cluster):
    addrs, live, start, stop = cluster
    await started_with_snapshots(cluster)
    for addr in addrs:
        await stop(addr)
    for addr in addrs[:2]:
        start(addr, restore=slow_restore(SLOW_RESTORE_S))
    await wait_until(lambda: all(loaded(g) for g in live.values()), "both loads", SLOW_RESTORE_S + DEADLINE_S)
    loaded_at = time.monotonic()
    bound = HOLD_BOUND_S + SETTINGS.election_max_s + SLACK_S
    await wait_until(lambda: leader_of(live.values()) is not None, "a leader of the two", bound)
    assert time.monotonic() - loaded_at < bound
