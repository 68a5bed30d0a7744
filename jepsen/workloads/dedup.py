"""The dedup workload: each txn is pushed again and again over several seconds, across failovers.

The partition must hold each txn exactly once when any push of it was acknowledged (at most once
otherwise), and every acknowledged push of one txn must name the same offset.
"""

from __future__ import annotations

import random
from typing import Any

from jepsen.checkers import check_replicas_agree, judged_on_partial_log
from jepsen.client import HistoryClient
from jepsen.cluster import ORDERS_TENANT
from jepsen.history import FaultWindow, Operation
from jepsen.queue_checkers import check_pushes
from jepsen.workloads import ConsumerSpec, FinalReads, PlannedOp, log_complete as _log_complete
from jepsen.workloads.messages import PushWorkload

QUEUE = "jd"
# Each txn is pushed about this many times, spread over ACTIVE_WINDOW_S, so its pushes straddle
# faults (a nemesis acts every few seconds).
PUSHES_PER_TXN = 6
ACTIVE_WINDOW_S = 10.0


class DedupWorkload(PushWorkload):
    tenant = ORDERS_TENANT
    queue = QUEUE
    name = "dedup"
    queues = [QUEUE]

    def plan(self, rng: random.Random, duration_s: float, rate: float) -> list[PlannedOp]:
        ops: list[PlannedOp] = []
        txns_per_s = rate / PUSHES_PER_TXN
        at = 0.0
        while True:
            at += rng.expovariate(rate)
            if at >= duration_s:
                return ops
            # The txns "alive" at time `at` were introduced during the last ACTIVE_WINDOW_S.
            newest = int(at * txns_per_s)
            oldest = max(0, int((at - ACTIVE_WINDOW_S) * txns_per_s))
            ops.append(PlannedOp(at, "push", {"txn": f"d-{rng.randint(oldest, newest)}"}))

    def consumers(self) -> list[ConsumerSpec]:
        return []

    async def setup(self, client: HistoryClient, process: Any) -> list[str]:
        return []

    def retry_on_info(self, op: PlannedOp) -> bool:
        return False

    def check(self, operations: list[Operation], windows: list[FaultWindow], final: FinalReads) -> dict:
        results = check_pushes(operations, final.logs.get(QUEUE, []), QUEUE, exactly_once_when_acked=True,
                               log_complete=_log_complete(final))
        results["replicas_agree"] = check_replicas_agree(final.replica_logs.get(QUEUE, {}), QUEUE)
        return results if _log_complete(final) else judged_on_partial_log(results)
