"""Workloads: what the clients do, what the final phase reads back, and which checkers judge it.

A workload plans its operations from the run's seeded random source before the run starts, so the
sequence of operations is reproducible from the seed; only the answers depend on the system.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Protocol

from jepsen.client import HistoryClient
from jepsen.history import FaultWindow, Operation


@dataclass
class PlannedOp:
    at_s: float  # offset from the start of the run
    f: str
    value: dict
    workload: str = ""  # the workload whose clients perform it (a run holds several)


@dataclass
class ConsumerSpec:
    queue: str
    group: str
    count: int
    # Builds each consumer (messages.Consumer's arguments); None: a plain messages.Consumer.
    factory: Callable[..., Any] | None = None


@dataclass
class FinalReads:
    """What the final phase read back: the partition logs (queue -> records) and notes."""

    logs: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # queue -> node -> {"records", "problem"}: the same partition read from each node alone.
    replica_logs: dict[str, dict[str, dict]] = field(default_factory=dict)
    # Anything else a workload reads back (the txn workload: KV rows and pending timers).
    state: dict[str, Any] = field(default_factory=dict)


class Workload(Protocol):
    name: str
    tenant: str  # the tenant (Raft group) its clients' token belongs to (jepsen/cluster.py)
    queues: list[str]

    def plan(self, rng: random.Random, duration_s: float, rate: float) -> list[PlannedOp]: ...

    def consumers(self) -> list[ConsumerSpec]: ...

    async def perform(self, client: HistoryClient, process: int, node: str, op: PlannedOp) -> str: ...

    def retry_on_info(self, op: PlannedOp) -> bool: ...

    def pending_deadline_wall_ms(self, operations: list[Operation], max_forward_skew_ms: int) -> int: ...

    async def final_reads(self, client: HistoryClient, process: Any, node: str) -> FinalReads: ...

    def check(self, operations: list[Operation], windows: list[FaultWindow], final: FinalReads) -> dict: ...


def log_complete(final: FinalReads) -> bool:
    """False when the final phase could not read some partition back whole."""
    return not any(note.startswith(tuple(f"{queue}:" for queue in final.logs)) for note in final.notes)


def make_workload(name: str) -> Workload:
    from jepsen.workloads.dedup import DedupWorkload
    from jepsen.workloads.queue import QueueWorkload
    from jepsen.workloads.timers import RememberedTimersWorkload, TimersWorkload
    from jepsen.workloads.transactions import TransactionsWorkload

    workloads = {"timers": TimersWorkload, "timers-remembered": RememberedTimersWorkload,
                 "queue": QueueWorkload, "dedup": DedupWorkload, "txn": TransactionsWorkload}
    if name not in workloads:
        raise ValueError(f"unknown workload {name!r}; one of {', '.join(workloads)}")
    return workloads[name]()


WORKLOAD_NAMES = ("timers", "timers-remembered", "queue", "dedup", "txn")

# Every run holds both tenants, as users run them: the workload it is named for, in its tenant, and
# these companions in the other one, at the same time, under the same faults. The timer workloads
# share a tenant; queue, dedup and txn share the other. So a timers run is timers | queue + txn.
COMPANIONS = {"timers": ("queue", "txn"), "timers-remembered": ("queue", "txn"),
              "queue": ("timers",), "txn": ("timers",), "dedup": ("timers",)}


def run_workloads(name: str, companions: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The workloads of a run named for `name`: it first, then its companions (COMPANIONS[name]
    unless given; an empty list runs it alone). Each appears once."""
    names = [name] + list(COMPANIONS[name] if companions is None else companions)
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"a run's workloads are distinct names of {', '.join(WORKLOAD_NAMES)}; got {names}")
    return names
