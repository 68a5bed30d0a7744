"""Faults: what each one does to the cluster, how it is undone, and its record in the history.

Each fault is started and stopped by the nemesis process, and both are written to the history as an
invocation (`{fault, phase}`) and an `info` completion carrying what was actually done (which node
was leader, which links were cut, which offsets were set). A window in the checkers spans from the
start's invocation to the stop's completion.

The random draws (which node, which offset, how long) come from the run's seeded plan; only the
role-based targets ("the leader") are resolved when the fault starts.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from jepsen.cluster import TENANT, Cluster
from jepsen.history import NEMESIS_PROCESS, HistoryWriter
from jepsen.network import bridge, grudge_links, isolate, majorities_ring, one_way
from jepsen.power import POWER_FAULTS, power_targets, torn_seed
from jepsen.snapshots import WriterWait, live_writers_of, outliving, wait_for_writers

KILL_FAULTS = ("kill-one", "kill-leader", "kill-all", "kill-follower-then-leader")
PAUSE_FAULTS = ("pause-leader",)
PARTITION_FAULTS = ("partition-one", "partition-leader", "partition-ring", "partition-bridge",
                    "partition-leader-outbound")
# clock-skew restarts nodes with an offset; clock-jump moves running nodes' clocks (the test route).
CLOCK_FAULTS = ("clock-skew", "clock-jump")
# Every node down while snapshot writers are running (see SNAPSHOT_WRITER_NODES), then every node
# started again together: by kill -9, or by SIGTERM and a wait for each node to exit.
SNAPSHOT_FAULTS = ("kill-all-during-snapshot", "stop-all-during-snapshot")
NEMESES: dict[str, tuple[str, ...]] = {
    "none": (),
    "kill": KILL_FAULTS,
    "kill-chain": ("kill-follower-then-leader",),
    "pause": PAUSE_FAULTS,
    "partition": PARTITION_FAULTS,
    "clock": CLOCK_FAULTS,
    "kill-all-during-snapshot": ("kill-all-during-snapshot",),
    "stop-all-during-snapshot": ("stop-all-during-snapshot",),
    # Power losses on lazy filesystems (power.py): runs under these nemeses mount them.
    "power": POWER_FAULTS,
    "mixed": KILL_FAULTS + PAUSE_FAULTS + PARTITION_FAULTS + CLOCK_FAULTS + SNAPSHOT_FAULTS + POWER_FAULTS,
}

# How long each fault stays in force (s). A pause must outlast the election timeout (0.2-0.6 s) and,
# sometimes, the leader fallback (2.5 s), so the old leader wakes up deposed with a tick in flight.
# Partitions outlast the fallback so an isolated leader steps down. A kill-all is short: the
# restart itself takes a few seconds.
FAULT_DURATION_S = {
    "kill-one": (2.0, 6.0),
    "kill-leader": (2.0, 6.0),
    "kill-all": (1.0, 3.0),
    "kill-follower-then-leader": (2.0, 5.0),
    "pause-leader": (1.5, 5.0),
    "partition-one": (3.0, 8.0),
    "partition-leader": (3.0, 8.0),
    "partition-ring": (3.0, 8.0),
    "partition-bridge": (3.0, 8.0),
    "partition-leader-outbound": (3.0, 8.0),
    "clock-skew": (5.0, 10.0),
    "clock-jump": (5.0, 10.0),
    # Down time before the restart: short, so the new processes start while the old writers may
    # still be renaming their snapshots into place.
    "kill-all-during-snapshot": (0.5, 3.0),
    "stop-all-during-snapshot": (0.0, 1.0),
    # Down time after a power loss: as long as a kill's, so the survivors elect and go on meanwhile.
    "power-one": (2.0, 6.0),
    "power-minority": (2.0, 6.0),
    "power-all": (1.0, 3.0),
}
# Quiet time between faults (s): long enough to elect and catch up, so each fault meets a cluster
# that had a chance to recover, and the lateness checker has quiet periods to compare with.
QUIET_S = (3.0, 8.0)
# kill-follower-then-leader: the leader dies this long after the follower, while the surviving
# follower is the only other copy of every acknowledged write (Kafka's lost-ISR pattern).
FOLLOWER_THEN_LEADER_GAP_S = (0.3, 2.0)
# ...and at the end the follower is restarted this long before the old leader.
FOLLOWER_FIRST_HEAD_START_S = 1.5
# Clock jumps are +-2^k ms, k in this range (Jepsen's clock nemesis spans ms to minutes).
SKEW_EXPONENTS = (2, 16)
# A restarted node must answer /health within this before the next step of a fault goes on.
RESTART_ANSWER_S = 20.0
# A snapshot fault acts once this many nodes have a snapshot writer running (the reproduction of the defect
# waited for two of three: a majority losing its snapshot). The members take turns to write
# (queen_raft/raft/compaction_turn.py), so two writers run together only when one outlasts a turn:
# the wait asks for two for SNAPSHOT_PAIR_WAIT_S, then for one until SNAPSHOT_WAIT_S. Without any,
# it acts anyway and its record says `during_snapshot: false`. The harness's compaction setting
# (run.py) makes a snapshot start every few seconds under the workloads' load.
SNAPSHOT_WRITER_NODES = 2
SNAPSHOT_PAIR_WAIT_S = 10.0
SNAPSHOT_WAIT_S = 30.0


@dataclass
class PlannedFault:
    at_s: float
    fault: str
    duration_s: float
    draws: dict[str, Any] = field(default_factory=dict)  # seeded choices: node index, offsets


def plan_faults(rng: random.Random, nemesis: str, duration_s: float, node_count: int) -> list[PlannedFault]:
    if nemesis not in NEMESES:
        raise ValueError(f"unknown nemesis {nemesis!r}; one of {', '.join(NEMESES)}")
    faults = NEMESES[nemesis]
    planned: list[PlannedFault] = []
    if not faults:
        return planned
    at = rng.uniform(*QUIET_S)
    while True:
        fault = rng.choice(faults)
        length = rng.uniform(*FAULT_DURATION_S[fault])
        if at + length >= duration_s:
            return planned
        draws = {
            "node": rng.randrange(node_count),
            "skews": [rng.choice((-1, 1)) * 2 ** rng.randint(*SKEW_EXPONENTS) for _ in range(node_count)],
            "skew_others": [rng.random() < 0.5 for _ in range(node_count)],
            "gap_s": round(rng.uniform(*FOLLOWER_THEN_LEADER_GAP_S), 3),
        }
        planned.append(PlannedFault(round(at, 3), fault, round(length, 3), draws))
        at += length + rng.uniform(*QUIET_S)


class Nemesis:
    """Runs planned faults against a cluster and records them; `heal_all` undoes everything."""

    def __init__(self, cluster: Cluster, history: HistoryWriter) -> None:
        self.cluster = cluster
        self.history = history
        self.injected: list[dict] = []
        self.max_forward_skew_ms = 0
        self._killed: set[str] = set()
        self._killed_order: list[str] = []
        self._skewed: set[str] = set()
        self._jumped: set[str] = set()
        self._paused: set[str] = set()
        self._writer_wait: WriterWait | None = None

    # -- running -----------------------------------------------------------------------------------

    async def run(self, planned: list[PlannedFault], started_mono: float, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        for fault in planned:
            if not await _sleep_until(loop, started_mono + fault.at_s, stop):
                return
            end = started_mono + fault.at_s + fault.duration_s
            if fault.fault in SNAPSHOT_FAULTS:
                self._writer_wait = await asyncio.to_thread(self.wait_for_writers, stop.is_set)
                if stop.is_set() and not self._writer_wait.found:
                    return  # the clients are done: a fault now would meet no operation
                end = loop.time() + fault.duration_s  # the wait moved the start
            done = await self._start(fault)
            if not done:
                continue
            await _sleep_until(loop, end, stop)
            await self._stop(fault)

    def wait_for_writers(self, stopped=lambda: False) -> WriterWait:
        """Blocks until SNAPSHOT_WRITER_NODES running nodes have a snapshot writer (for
        SNAPSHOT_PAIR_WAIT_S), then until one has, or SNAPSHOT_WAIT_S in all."""
        pids = {node: self.cluster.nodes[node].pid for node in self.cluster.node_ids
                if self.cluster.nodes[node].alive() and not self.cluster.nodes[node].paused}
        children = live_writers_of(TENANT)
        pair = wait_for_writers(pids, SNAPSHOT_WRITER_NODES, SNAPSHOT_PAIR_WAIT_S, stop=stopped, children=children)
        if pair.found or stopped():
            return pair
        one = wait_for_writers(pids, 1, SNAPSHOT_WAIT_S - SNAPSHOT_PAIR_WAIT_S, stop=stopped, children=children)
        return WriterWait(one.found, pair.waited_s + one.waited_s, pair.looks + one.looks, one.writers)

    async def record(self, fault: str, phase: str, action) -> dict:
        invocation = self.history.invoke(NEMESIS_PROCESS, fault, {"fault": fault, "phase": phase})
        try:
            detail = await asyncio.to_thread(action)
        except Exception as error:  # the harness must go on and heal; the failure is in the history
            detail = {"error": f"{type(error).__name__}: {error}"}
        value = {"fault": fault, "phase": phase}
        value.update(detail)
        self.history.complete(invocation, "info", answer=detail, value=value)
        return detail

    async def _start(self, fault: PlannedFault) -> bool:
        detail = await self.record(fault.fault, "start", lambda: self._start_sync(fault))
        self.injected.append({"fault": fault.fault, "at_s": fault.at_s, "duration_s": fault.duration_s,
                              "detail": detail})
        return True

    async def _stop(self, fault: PlannedFault) -> dict:
        return await self.record(fault.fault, "stop", lambda: self._stop_sync(fault))

    def _target(self, draws: dict) -> str:
        ids = self.cluster.node_ids
        return ids[draws["node"] % len(ids)]

    def _leader_or_drawn(self, draws: dict) -> tuple[str, str | None]:
        leader = self.cluster.leader()
        return (leader if leader is not None else self._target(draws)), leader

    def _start_sync(self, fault: PlannedFault) -> dict:
        kind, draws, ids = fault.fault, fault.draws, self.cluster.node_ids
        if kind == "kill-one":
            node = self._target(draws)
            self.cluster.kill(node)
            self._killed.add(node)
            return {"nodes": [node]}
        if kind == "kill-leader":
            node, leader = self._leader_or_drawn(draws)
            self.cluster.kill(node)
            self._killed.add(node)
            return {"nodes": [node], "leader": leader}
        if kind == "kill-follower-then-leader":
            leader = self.cluster.leader()
            followers = [node for node in ids if node != leader]
            follower = followers[draws["node"] % len(followers)]
            self.cluster.kill(follower)
            self._killed.add(follower)
            self._killed_order = [follower]
            time.sleep(draws["gap_s"])
            second = self.cluster.leader() or leader
            killed = [follower]
            if second is not None and second != follower:
                self.cluster.kill(second)
                self._killed.add(second)
                self._killed_order.append(second)
                killed.append(second)
            return {"nodes": killed, "leader": leader, "gap_s": draws["gap_s"]}
        if kind == "kill-all":
            for node in ids:
                self.cluster.kill(node)
                self._killed.add(node)
            return {"nodes": ids}
        if kind in SNAPSHOT_FAULTS:
            return self._all_down_during_snapshot(kind)
        if kind in POWER_FAULTS:
            leader = self.cluster.leader()
            nodes = power_targets(kind, ids, leader, draws["node"])
            self._killed.update(nodes)
            dropped = self.cluster.disks.power_off(self.cluster, nodes, torn_seed(fault.at_s))
            return {"nodes": nodes, "leader": leader, "dropped": dropped}
        if kind == "pause-leader":
            node, leader = self._leader_or_drawn(draws)
            self.cluster.pause(node)
            self._paused.add(node)
            return {"nodes": [node], "leader": leader}
        if kind.startswith("partition"):
            leader = None
            if kind == "partition-one":
                grudge = isolate(self._target(draws), ids)
            elif kind == "partition-leader":
                node, leader = self._leader_or_drawn(draws)
                grudge = isolate(node, ids)
            elif kind == "partition-ring":
                grudge = majorities_ring(ids)
            elif kind == "partition-bridge":
                grudge = bridge(ids, self._target(draws))
            else:  # partition-leader-outbound: nobody hears the leader; it still hears everyone
                node, leader = self._leader_or_drawn(draws)
                grudge = {}
                for other in ids:
                    if other != node:
                        grudge.update(one_way(node, other))
            links = grudge_links(grudge)
            self.cluster.network.cut(links)
            return {"grudge": {k: sorted(v) for k, v in grudge.items()}, "leader": leader,
                    "cut": sorted(map(list, links))}
        if kind in ("clock-skew", "clock-jump"):
            leader = self.cluster.leader()
            wanted = {}
            for position, node in enumerate(ids):
                if node == leader or draws["skew_others"][position] or leader is None and position == draws["node"]:
                    wanted[node] = int(draws["skews"][position])
            offsets, refused = {}, {}
            for node, offset in wanted.items():
                if kind == "clock-skew":
                    self._restart(node, offset)
                    self._skewed.add(node)
                else:
                    answer = self.cluster.set_clock(node, offset)
                    if "error" in answer:
                        refused[node] = answer
                        continue
                    self._jumped.add(node)
                offsets[node] = offset
                self.max_forward_skew_ms = max(self.max_forward_skew_ms, offset)
            detail = {"leader": leader, "offsets": offsets}
            if refused:
                detail["refused"] = refused
            return detail
        raise ValueError(f"unknown fault {kind!r}")

    def _all_down_during_snapshot(self, kind: str) -> dict:
        ids = self.cluster.node_ids
        wait = self._writer_wait or WriterWait(False, 0.0, 0)
        leader = self.cluster.leader()
        if kind == "kill-all-during-snapshot":
            ended = {node: "killed" if self.cluster.kill(node) else "not running" for node in ids}
        else:
            ended = self.cluster.stop_all(ids)
        self._killed.update(ids)
        return {"nodes": ids, "leader": leader, **wait.to_json(), "ended": ended,
                "writers_outliving_nodes": outliving(wait.writers)}

    def _restart(self, node: str, offset: int) -> None:
        self.cluster.restart(node, clock_offset_ms=offset, hard=True)
        self.cluster.wait_answering(node, RESTART_ANSWER_S)

    def _stop_sync(self, fault: PlannedFault) -> dict:
        kind = fault.fault
        if kind == "kill-follower-then-leader":
            # The follower first, so it and the survivor elect a leader before the old leader (the
            # one node sure to hold every acknowledged write) is back to veto a short log.
            order = list(self._killed_order)
            for position, node in enumerate(order):
                if position:
                    time.sleep(FOLLOWER_FIRST_HEAD_START_S)
                self.cluster.start(node)
            self._killed.clear()
            self._killed_order.clear()
            return {"restarted": order}
        if kind in POWER_FAULTS:
            restarted = sorted(self._killed)
            self._killed.clear()
            return {"restarted": self.cluster.disks.restart(self.cluster, restarted)}
        if kind.startswith("kill") or kind in SNAPSHOT_FAULTS:
            # Every node of kill-all and the snapshot faults is started at once: the new processes
            # read their journals and snapshots while any writer left behind may still be renaming.
            writers_left = outliving(self._writer_wait.writers) if kind in SNAPSHOT_FAULTS and self._writer_wait else None
            restarted = sorted(self._killed)
            for node in restarted:
                self.cluster.start(node)
            self._killed.clear()
            detail: dict = {"restarted": restarted}
            if writers_left is not None:
                detail["writers_alive_at_restart"] = writers_left
            return detail
        if kind == "pause-leader":
            resumed = sorted(self._paused)
            for node in resumed:
                self.cluster.resume(node)
            self._paused.clear()
            return {"resumed": resumed}
        if kind.startswith("partition"):
            closed = self.cluster.network.heal()
            return {"healed": True, "tainted_connections_closed": closed}
        if kind == "clock-skew":
            reset = sorted(self._skewed)
            for node in reset:
                self._restart(node, 0)
            self._skewed.clear()
            return {"reset": reset}
        if kind == "clock-jump":
            answers = {node: self.cluster.set_clock(node, 0) for node in sorted(self._jumped)}
            self._jumped.clear()
            return {"reset": sorted(answers), "refused": {n: a for n, a in answers.items() if "error" in a}}
        raise ValueError(f"unknown fault {kind!r}")

    def heal_all_sync(self) -> dict:
        """Undo every fault: resume, heal links, restart the dead, unskew the skewed."""
        resumed = [node for node in self.cluster.node_ids if self.cluster.nodes[node].paused]
        for node in resumed:
            self.cluster.resume(node)
        closed = self.cluster.network.heal()
        # A runtime offset is set back through the route; a node that does not take it is restarted.
        unjumped = [node for node in self.cluster.node_ids if self.cluster.nodes[node].runtime_clock_offset_ms]
        kept_jump = [node for node in unjumped if "error" in self.cluster.set_clock(node, 0)]
        unskewed = [node for node in self.cluster.node_ids if self.cluster.nodes[node].clock_offset_ms or node in kept_jump]
        for node in unskewed:
            self.cluster.kill(node)
        started = [node for node in self.cluster.node_ids if not self.cluster.nodes[node].alive()]
        for node in started:
            self.cluster.start(node)
        self._killed.clear()
        self._paused.clear()
        self._skewed.clear()
        self._jumped.clear()
        return {"resumed": resumed, "tainted_connections_closed": closed, "unjumped": unjumped, "unskewed": unskewed,
                "started": started}

    async def heal_all(self) -> dict:
        """Recorded as a fault window of its own: restarts and reconnections take time to settle."""
        detail = await self.record("heal-all", "start", self.heal_all_sync)
        await self.record("heal-all", "stop", lambda: {})
        return detail


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float, stop: asyncio.Event) -> bool:
    """Sleeps until the loop's clock reaches deadline; False when stopped first."""
    remaining = deadline - loop.time()
    if remaining <= 0:
        return not stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), remaining)
        return False
    except asyncio.TimeoutError:
        return True
