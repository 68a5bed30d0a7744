"""The run's plan (seeded, so a run is reproducible from its seed) and the phases that carry it out.

- `make_plan`: every client operation and every fault, drawn before the run from random sources
  derived from the seed, one per workload and one for the nemesis (so changing the nemesis, or the
  workloads beside one, does not change that workload's client operations).
- `run_clients`: hands each planned operation of one workload, at its instant, to a free logical
  process of that workload. A process runs one operation at a time; after an `info` it is replaced
  by a fresh process id (Jepsen's rule: the old operation may still be in flight) and moves to the
  next node. The workloads of a run each have their own processes, running side by side.
- `final_phase`: heal every fault, restart every node on its data, wait until every timer that may be
  pending is due plus a margin, then read everything back.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass, field

from jepsen.client import HistoryClient
from jepsen.cluster import Cluster
from jepsen.history import INFO, HistoryWriter, NEMESIS_PROCESS, pair_operations, wall_ms, workload_operations
from jepsen.nemesis import Nemesis, PlannedFault, plan_faults
from jepsen.workloads import FinalReads, PlannedOp, Workload

# Logical client processes (operations in flight at once). A handful is enough to make operations
# on one key overlap; more would only queue on 2 shared cores.
DEFAULT_CONCURRENCY = 6
# After the final restart the cluster must report a leader within this, or the reads go ahead
# anyway and the run notes it (a cluster that never recovers is itself a finding).
FINAL_HEALTHY_TIMEOUT_S = 60.0
# The longest the final phase waits for timers to fall due. A forward skew of 2^16 ms pushes the
# group clock ~65 s ahead; past this bound the run reports that it stopped waiting.
MAX_FINAL_WAIT_S = 150.0


@dataclass
class RunPlan:
    workload: str
    nemesis: str
    seed: int
    duration_s: float
    rate: float
    concurrency: int
    ops: list[PlannedOp] = field(default_factory=list)  # every workload's, by instant, each tagged
    faults: list[PlannedFault] = field(default_factory=list)
    preload: int = 0
    companions: list[str] = field(default_factory=list)  # the workloads run beside `workload`

    @property
    def workloads(self) -> list[str]:
        return [self.workload] + self.companions

    def ops_of(self, workload: str) -> list[PlannedOp]:
        return [op for op in self.ops if op.workload == workload]

    def to_json(self) -> dict:
        return {
            "workload": self.workload, "companions": self.companions, "nemesis": self.nemesis, "seed": self.seed,
            "duration_s": self.duration_s, "rate": self.rate, "concurrency": self.concurrency, "preload": self.preload,
            "ops": [asdict(op) for op in self.ops], "faults": [asdict(fault) for fault in self.faults],
        }


def make_plan(workloads: Workload | list[Workload], nemesis: str, seed: int, duration_s: float, rate: float,
              node_count: int, concurrency: int = DEFAULT_CONCURRENCY, preload: int = 0) -> RunPlan:
    """The plan of a run of `workloads` (the first names the run), each at `rate` operations/s with
    `concurrency` processes of its own."""
    workloads = workloads if isinstance(workloads, list) else [workloads]
    ops: list[PlannedOp] = []
    for workload in workloads:
        for op in workload.plan(random.Random(f"{seed}/ops/{workload.name}"), duration_s, rate):
            op.workload = workload.name
            ops.append(op)
    ops.sort(key=lambda op: op.at_s)
    fault_rng = random.Random(f"{seed}/faults/{nemesis}")
    return RunPlan(workloads[0].name, nemesis, seed, duration_s, rate, concurrency, ops,
                   plan_faults(fault_rng, nemesis, duration_s, node_count), preload,
                   [workload.name for workload in workloads[1:]])


@dataclass
class _Worker:
    slot: int
    process: int
    node_index: int


async def run_clients(workload: Workload, client: HistoryClient, plan: RunPlan, started_mono: float,
                      stop: asyncio.Event, first_slot: int = 0) -> None:
    """Runs `workload`'s planned operations. Its processes are slots first_slot.. of the run's
    (workloads x concurrency) slots; after an info a process id moves on by the run's slot count, so
    no two workloads ever share one."""
    loop = asyncio.get_running_loop()
    free: asyncio.Queue[_Worker] = asyncio.Queue()
    slots = plan.concurrency * len(plan.workloads)
    for slot in range(first_slot, first_slot + plan.concurrency):
        free.put_nowait(_Worker(slot, slot, slot))
    in_flight: set[asyncio.Task] = set()
    node_ids = client.node_ids

    async def perform(worker: _Worker, op: PlannedOp) -> None:
        try:
            retries = int(op.value.get("retries", 0)) if workload.retry_on_info(op) else 0
            while True:
                node = node_ids[worker.node_index % len(node_ids)]
                type_ = await workload.perform(client, worker.process, node, op)
                if type_ == INFO:
                    worker.process += slots
                    worker.node_index += 1
                    if retries > 0 and not stop.is_set():
                        retries -= 1
                        continue
                return
        finally:
            free.put_nowait(worker)

    for op in plan.ops_of(workload.name):
        delay = started_mono + op.at_s - loop.time()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except asyncio.TimeoutError:
                pass
        if stop.is_set():
            break
        worker = await free.get()
        task = asyncio.create_task(perform(worker, op))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)


async def final_phase(workloads: list[tuple[Workload, HistoryClient]], cluster: Cluster, nemesis: Nemesis,
                      history: HistoryWriter, notes: list[str]) -> dict[str, FinalReads]:
    """Heals, restarts every node, waits out every workload's pending timers, then reads each
    workload back through its own tenant's client: workload name -> what it read."""
    await nemesis.heal_all()

    def restart_all() -> dict:
        for node in cluster.node_ids:
            cluster.kill(node)
        cluster.start_all()
        return {"restarted": cluster.node_ids, "healthy": cluster.wait_healthy(FINAL_HEALTHY_TIMEOUT_S)}

    detail = await nemesis.record("restart-all", "start", restart_all)
    await nemesis.record("restart-all", "stop", lambda: {})
    if not detail.get("healthy"):
        notes.append(f"the cluster was not healthy {FINAL_HEALTHY_TIMEOUT_S:.0f} s after the final restart")

    operations = pair_operations(event for event in history.events)
    deadline_ms = max(workload.pending_deadline_wall_ms(workload_operations(operations, workload.name),
                                                        nemesis.max_forward_skew_ms)
                      for workload, _ in workloads)
    wait_s = max(0.0, (deadline_ms - wall_ms()) / 1000.0)
    if wait_s > MAX_FINAL_WAIT_S:
        notes.append(f"final wait cut from {wait_s:.0f} s to {MAX_FINAL_WAIT_S:.0f} s")
        wait_s = MAX_FINAL_WAIT_S
    history.complete(history.invoke(NEMESIS_PROCESS, "final-wait", {"fault": "final-wait", "phase": "info"}),
                     "info", answer={"wait_s": round(wait_s, 3), "deadline_wall_ms": deadline_ms})
    await asyncio.sleep(wait_s)
    reads: dict[str, FinalReads] = {}
    for workload, client in workloads:
        started = time.monotonic()
        reads[workload.name] = await workload.final_reads(client, "final", cluster.node_ids[0])
        reads[workload.name].notes.append(f"final reads took {time.monotonic() - started:.1f} s")
    return reads
