"""Three real node processes of one group on 127.0.0.1 (raft_node_fixture.py), with the test state."""

from __future__ import annotations

import itertools
import os
import threading
import time

import pytest

from raft_node_fixture import NodeUnavailable, RaftTestCluster
from port_blocks import worker_port

pytestmark = pytest.mark.integration

# Each cluster takes 3 Raft ports and 3 HTTP ports out of a block of 10, in 17xxx where nothing
# else of this project listens (dev configs use 66xx / 74xx).
_PORT_BLOCKS = itertools.count(worker_port(17300), 10)
ONE_MIB = 1024 * 1024
# Failover after kill -9 takes 0.2-2 s with these timings. 3 s leaves room for a loaded 2-core CI box without hiding a regression
# to stock timings (30 s fallback, 5 s reconnect).
FAILOVER_BOUND_S = 3.0


@pytest.fixture
def make_cluster(tmp_path):
    clusters = []

    def make(extra_args=None) -> RaftTestCluster:
        base = next(_PORT_BLOCKS)
        cluster = RaftTestCluster(str(tmp_path), base, base + 5, extra_args=extra_args)
        clusters.append(cluster)
        return cluster.start()

    yield make
    for cluster in clusters:
        cluster.stop()


def propose_with_retry(node, command, attempts=50):
    """Writes are idempotent by key here, so an unknown outcome is retried, as a client would."""
    for _ in range(attempts):
        try:
            return node.propose(command)
        except NodeUnavailable as exc:
            time.sleep(min(exc.retry_after, 0.2))
    raise AssertionError(f"{command['op']} never committed through {node.raft_addr}")


def test_commit_from_leader_and_from_follower(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    follower = cluster.followers(leader)[0]

    from_leader = leader.propose({"op": "set", "key": "a", "value": "from-leader"})
    from_follower = follower.propose({"op": "set", "key": "b", "value": "from-follower"})

    # The result comes back to the proposer, also when pysyncobj forwarded the call to the leader.
    assert from_leader["ok"] is True and from_follower["ok"] is True
    assert from_follower["applied"] == from_leader["applied"] + 1
    for node in cluster.nodes:
        assert node.read("values") == {"a": "from-leader", "b": "from-follower"}
    # fsync=group is the default: the journal was flushed on every node.
    assert all(node.status()["journalFlushes"] > 0 for node in cluster.nodes)


def test_one_mib_entry_commits_quickly_and_replicates(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    follower = cluster.followers(leader)[0]
    big = "x" * ONE_MIB

    started = time.monotonic()
    follower.propose({"op": "set", "key": "big", "value": big})
    elapsed = time.monotonic() - started

    # Stock pysyncobj took ~2 s per 1 MiB entry; the recipe ~7 ms from a follower. 1 s bounds
    # a regression to stock behaviour with room for a loaded machine and the HTTP round trip.
    assert elapsed < 1.0, f"1 MiB entry took {elapsed:.3f} s"
    for node in cluster.nodes:
        assert node.read("value_sizes") == {"big": ONE_MIB}
    terms = {node.status()["term"] for node in cluster.nodes}
    assert len(terms) == 1, f"an election happened during the large entry: terms {terms}"


def test_leader_kill_elects_a_new_leader_and_its_tick_fires_the_rest(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    keys = [f"t{i:03d}" for i in range(40)]
    for i, key in enumerate(keys):
        # Due from 0.3 s to 2.25 s from now, so some fire before the kill and some after.
        propose_with_retry(leader, {"op": "timer", "key": key, "delayMs": 300 + 50 * i})
    time.sleep(0.5)
    fired_before_kill = {f[0] for f in leader.read("fired")}
    assert fired_before_kill, "the leader's tick fired nothing before the kill"
    assert all(f.status()["ticksProposed"] == 0 for f in cluster.followers(leader)), "followers never tick"

    killed_at = time.monotonic()
    killed_at_ms = time.time() * 1000
    leader.kill()
    survivors = cluster.followers(leader)
    new_leader = cluster.wait_for_leader(among=survivors, timeout=FAILOVER_BOUND_S)
    failover_s = time.monotonic() - killed_at
    assert new_leader is not leader
    assert failover_s < FAILOVER_BOUND_S

    deadline = time.monotonic() + 10
    while True:
        fired = new_leader.read("fired")
        if len({f[0] for f in fired}) == len(keys) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    fired_keys = [f[0] for f in fired]
    assert sorted(fired_keys) == keys, "every timer fires exactly once across the failover"
    assert all(fired_at >= due_at for _, due_at, fired_at in fired), "nothing fires before its instant"
    assert new_leader.status()["ticksProposed"] > 0, "the new leader's tick loop took over"
    # The gap from the kill to the next fire (target: <= 2 s; here bounded like the failover).
    first_fire_after_kill_ms = min(fired_at for _, _, fired_at in fired if fired_at > killed_at_ms)
    assert first_fire_after_kill_ms - killed_at_ms < FAILOVER_BOUND_S * 1000
    assert survivors[0].read("fired") == survivors[1].read("fired")

    # The killed node comes back on its data dir and catches up.
    leader.start()
    deadline = time.monotonic() + 10
    while leader.local("fired") != fired and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leader.local("fired") == fired


@pytest.mark.parametrize("fsync", ["group", "off"])
def test_restart_of_all_nodes_keeps_state_from_snapshot_and_journal(make_cluster, fsync):
    # Compaction after 40 entries: 120 writes compact at least twice on every node, so the restart
    # must combine a snapshot with the journal tail (a journal alone would lose the compacted part).
    # kill -9 loses nothing in either fsync mode: the page cache keeps the mmap'd journal.
    cluster = make_cluster(["--compaction-entries", "40", "--fsync", fsync])
    leader = cluster.wait_for_leader()
    for i in range(120):
        propose_with_retry(leader, {"op": "set", "key": f"k{i:03d}", "value": i})
    expected = {f"k{i:03d}": i for i in range(120)}
    for node in cluster.nodes:
        assert node.read("values") == expected
    deadline = time.monotonic() + 10
    while not all(os.path.exists(os.path.join(n.data_dir, "raft.snapshot")) for n in cluster.nodes):
        assert time.monotonic() < deadline, "no snapshot was written"
        time.sleep(0.05)

    cluster.kill_all()
    for node in cluster.nodes:
        node.start()
    leader = cluster.wait_for_leader()
    for node in cluster.nodes:
        assert node.read("values") == expected
    after = propose_with_retry(cluster.followers(leader)[0], {"op": "set", "key": "after", "value": 1})
    assert after["ok"] is True


def test_read_barrier_sees_every_acknowledged_write_and_is_shared(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    follower_a, follower_b = cluster.followers(leader)

    # A write acknowledged by one node is seen by a barrier read on any other, every time.
    for i in range(30):
        writer, reader = [(leader, follower_a), (follower_a, follower_b), (follower_b, leader)][i % 3]
        writer.propose({"op": "set", "key": "x", "value": i})
        assert reader.read("values")["x"] == i

    # Reads that wait together share barriers: 40 concurrent reads need far fewer than 40 entries.
    before = follower_a.status()["barriersProposed"]
    results = []
    threads = [threading.Thread(target=lambda: results.append(follower_a.read("applied"))) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    barriers = follower_a.status()["barriersProposed"] - before
    assert len(results) == 40
    assert 1 <= barriers < 40, f"{barriers} barriers for 40 concurrent reads"


@pytest.mark.parametrize("fsync", ["group", "off"])
def test_kill_of_all_nodes_in_the_middle_of_writes_loses_no_acknowledged_write(make_cluster, fsync):
    # Compaction every 15 entries keeps every node near a snapshot/compaction boundary when killed:
    # the window in which stock pysyncobj drops the journal's tail on restart.
    cluster = make_cluster(["--compaction-entries", "15", "--fsync", fsync])
    leader = cluster.wait_for_leader()
    acknowledged: list[str] = []
    writing = threading.Event()
    writing.set()

    def write_until_killed():
        i = 0
        while writing.is_set():
            try:
                leader.propose({"op": "set", "key": f"k{i:05d}", "value": i}, timeout=2)
            except Exception:  # the kill: connection refused or reset
                return
            acknowledged.append(f"k{i:05d}")
            i += 1

    writer = threading.Thread(target=write_until_killed)
    writer.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 100:  # several compactions deep, still writing
        assert time.monotonic() < deadline, "writes did not progress"
        time.sleep(0.01)
    cluster.kill_all()
    writing.clear()
    writer.join()

    for node in cluster.nodes:
        node.start()
    cluster.wait_for_leader()
    for node in cluster.nodes:
        present = node.read("values")
        assert [k for k in acknowledged if k not in present] == []


def test_a_write_through_a_follower_right_after_the_leader_dies_answers_quickly(make_cluster):
    cluster = make_cluster()
    leader = cluster.wait_for_leader()
    follower = cluster.followers(leader)[0]
    leader.kill()
    # Until the next election the follower still names the dead leader; a write must not vanish
    # into its closed connection and hang for the commit timeout (5 s).
    started = time.monotonic()
    try:
        follower.propose({"op": "set", "key": "k", "value": 1})
    except NodeUnavailable as exc:
        assert exc.reason in ("no_leader", "leader_changed")
    assert time.monotonic() - started < 2.0
