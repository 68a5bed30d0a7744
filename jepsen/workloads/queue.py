"""The queue workload: pushes with a txn each (retried with the same txn after `info`), and two
consumer groups popping and acking the same partition.
"""

from __future__ import annotations

import random
from typing import Any

from jepsen.checkers import check_replicas_agree, judged_on_partial_log
from jepsen.client import HistoryClient
from jepsen.cluster import ORDERS_TENANT
from jepsen.history import Operation, FaultWindow
from jepsen.queue_checkers import check_pushes, check_queue_consumption
from jepsen.workloads import ConsumerSpec, FinalReads, PlannedOp, log_complete as _log_complete
from jepsen.workloads.messages import CONSUMER_LEASE_TIME_S, PushWorkload, configure_queue

QUEUE = "jq"
GROUPS = ("ga", "gb")
CONSUMERS_PER_GROUP = 2
# A push whose outcome is unknown is sent again with the same txn (dedup makes that safe) at most
# this many times, so one stuck txn cannot eat the whole run.
MAX_PUSH_RETRIES = 3


class QueueWorkload(PushWorkload):
    tenant = ORDERS_TENANT
    queue = QUEUE
    name = "queue"
    queues = [QUEUE]

    def plan(self, rng: random.Random, duration_s: float, rate: float) -> list[PlannedOp]:
        ops: list[PlannedOp] = []
        at = 0.0
        while True:
            at += rng.expovariate(rate)
            if at >= duration_s:
                return ops
            ops.append(PlannedOp(at, "push", {"txn": f"q-{len(ops)}", "retries": MAX_PUSH_RETRIES}))

    def consumers(self) -> list[ConsumerSpec]:
        return [ConsumerSpec(QUEUE, group, CONSUMERS_PER_GROUP) for group in GROUPS]

    async def setup(self, client: HistoryClient, process: Any) -> list[str]:
        ok = await configure_queue(client, process, QUEUE, {"leaseTime": CONSUMER_LEASE_TIME_S})
        return [] if ok else [f"could not configure {QUEUE}; lost acks block a group for the default lease"]

    def retry_on_info(self, op: PlannedOp) -> bool:
        return True

    def check(self, operations: list[Operation], windows: list[FaultWindow], final: FinalReads) -> dict:
        log = final.logs.get(QUEUE, [])
        results = check_pushes(operations, log, QUEUE, log_complete=_log_complete(final))
        results.update(check_queue_consumption(operations, log, QUEUE))
        results["replicas_agree"] = check_replicas_agree(final.replica_logs.get(QUEUE, {}), QUEUE)
        return results if _log_complete(final) else judged_on_partial_log(results)
