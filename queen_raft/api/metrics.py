"""The meters of GET /metrics (served by health.py): the raft and timer families of docs/spec.md
section 5, in Prometheus text.

Node-local events (requests, refusals, commit times, fire lag seen by this leader) are counted as
they happen. Replicated figures (pending timers, fires by result, pushed and billed messages) are
read from the group's state at scrape time, so they are exact after a failover and every node
exports the same values for them.
"""

from __future__ import annotations

import bisect
import collections
import logging
import math
import threading
import time
from operator import itemgetter, methodcaller
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from queen_raft.api.loop_histogram import LoopHistogram
from queen_raft.raft.group_api import GroupApi

log = logging.getLogger(__name__)

# Fire lag: a healthy fire lands within a few ms of deliverAt; the tail up to a minute shows a
# backlog or a backoff (docs/spec.md section 2).
FIRE_LAG_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
# Commits: ~0.25 ms p50 small entries, ~5 ms for 1 MiB, up to the 5 s commit timeout.
COMMIT_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Queue names are the tenants' to choose, without a bound on how many: a node exports at most this
# many queue series per tenant (the first queues it sees fire), and counts the fires of any other
# queue under OTHER_QUEUES, so a tenant with thousands of queues cannot swell every scrape.
QUEUE_SERIES_PER_TENANT = 100
OTHER_QUEUES = "__other__"
# From this many ops a call's tally is counted in C (Counter over maps), not a loop turn per op;
# below it the Counter's own setup costs more than the loop.
TALLY_IN_C_FROM_OPS = 16
_OP = itemgetter("op")
_status_of = methodcaller("get", "status", "?")
HTTP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ReplicatedStateCollector(Collector):
    """Reads each group's counters and Raft status when Prometheus scrapes."""

    def __init__(self, groups_source: Callable[[], Mapping[str, GroupApi]],
                 quotas: Mapping[str, int | None] | None = None):
        self._groups_source = groups_source
        self._quotas = quotas or {}

    def collect(self) -> Iterable:
        pending = GaugeMetricFamily("queen_timers_pending", "Timers waiting to fire", labels=["tenant"])
        fired = CounterMetricFamily("queen_timers_fired", "Timer fires by result", labels=["tenant", "result"])
        pushed = CounterMetricFamily("queen_messages_pushed", "Messages appended by pushes", labels=["tenant"])
        billed = CounterMetricFamily("queen_billed_messages", "Billed messages (schedule, reschedule, push item)", labels=["tenant"])
        is_leader = GaugeMetricFamily("queen_raft_is_leader", "1 when this node leads the tenant's group", labels=["tenant"])
        term = GaugeMetricFamily("queen_raft_term", "Raft term of the tenant's group on this node", labels=["tenant"])
        commit_index = GaugeMetricFamily("queen_raft_commit_index", "Raft commit index on this node", labels=["tenant"])
        dlq = GaugeMetricFamily("queen_dlq_messages", "Dead-lettered messages waiting for a replay", labels=["tenant"])
        quota = GaugeMetricFamily("queen_timers_quota", "The tenant's pending-timer quota (absent: none)", labels=["tenant"])
        flush = HistogramMetricFamily("queen_raft_journal_flush_seconds", "Journal fdatasync time on this node",
                                      labels=["tenant"])
        links = GaugeMetricFamily("queen_raft_peer_links", "1 for each peer of the tenant's group, labelled with how "
                                  "this node's link to it is framed: aead, fernet, plain or none (no link now)",
                                  labels=["tenant", "peer", "frame"])
        aead_frames = CounterMetricFamily("queen_raft_peer_aead_frames", "AEAD peer frames over this node's current "
                                          "link to the peer, by direction; from 0 when the link reconnects",
                                          labels=["tenant", "peer", "direction"])
        disk_faults = DiskFaultFamilies()
        for tenant, group in self._groups_source().items():
            try:
                counters, dlq_rows = group.peek_local(
                    lambda state: (state.counters(), sum(len(q.dlq) for q in state.broker.queues.values())))
                status = group.status()
            except Exception:  # a group that is stopping must not break the whole scrape
                log.exception("metrics: group %s could not be read", tenant)
                continue
            pending.add_metric([tenant], counters.get("pendingTimers", 0))
            for result in ("appended", "duplicate", "failed", "dlq"):
                fired.add_metric([tenant, result], counters.get("fired", {}).get(result, 0))
            pushed.add_metric([tenant], counters.get("pushedMessages", 0))
            billed.add_metric([tenant], counters.get("billedMessages", 0))
            is_leader.add_metric([tenant], 1 if status.get("role") == "leader" else 0)
            term.add_metric([tenant], status.get("term") or 0)
            commit_index.add_metric([tenant], status.get("commitIndex") or 0)
            dlq.add_metric([tenant], dlq_rows)
            if self._quotas.get(tenant) is not None:
                quota.add_metric([tenant], self._quotas[tenant])
            if status.get("journalFlush"):
                add_histogram(flush, tenant, status["journalFlush"])
            add_peer_links(links, aead_frames, tenant, status.get("peerLinks") or {})
            disk_faults.add(tenant, status)
        return [pending, fired, pushed, billed, is_leader, term, commit_index, dlq, quota, flush, links, aead_frames,
                *disk_faults.families()]


class DiskFaultFamilies:
    """The disk faults a group's status names on this node that its Raft view does not show: snapshot
    writers that fail (the journal grows) and term stores that fail (the member is out of the group)."""

    def __init__(self) -> None:
        self.writers_failed = CounterMetricFamily(
            "queen_raft_snapshot_writers_failed", "Snapshot writers of the tenant's group that failed on this node "
            "since it started", labels=["tenant"])
        self.writers_failing = GaugeMetricFamily(
            "queen_raft_snapshot_writers_failing", "Snapshot writers that failed in a row on this node (0 after one "
            "succeeds): while above 0 the journal is not compacted and grows", labels=["tenant"])
        self.term_stores_failed = CounterMetricFamily(
            "queen_raft_term_stores_failed", "Stores of a Raft term or vote of the tenant's group that failed on "
            "this node since it started", labels=["tenant"])
        self.term_store_failing = GaugeMetricFamily(
            "queen_raft_term_store_failing", "1 while this node's last store of a Raft term or vote failed (0 once "
            "one succeeds): it takes no newer term, so it neither votes nor follows the group's leader",
            labels=["tenant"])

    def add(self, tenant: str, status: Mapping) -> None:
        writers = status.get("snapshotWriters")
        if writers:
            self.writers_failed.add_metric([tenant], writers["failed"])
            self.writers_failing.add_metric([tenant], writers["failing"])
        term_store = status.get("termStore")
        if term_store:
            self.term_stores_failed.add_metric([tenant], term_store["failed"])
            self.term_store_failing.add_metric([tenant], 1 if term_store["failing"] else 0)

    def families(self) -> list[Metric]:
        return [self.writers_failed, self.writers_failing, self.term_stores_failed, self.term_store_failing]


def add_peer_links(links: GaugeMetricFamily, aead_frames: CounterMetricFamily, tenant: str,
                   peer_links: Mapping[str, Mapping]) -> None:
    """One series at 1 per peer, its frame kind as a label (raft/peer_links.py), so a peer is never
    missing from the answer: a rolling upgrade is done when no series has a frame other than aead."""
    for peer, link in peer_links.items():
        links.add_metric([tenant, peer, link["frame"]], 1)
        aead_frames.add_metric([tenant, peer, "sent"], link["aeadFramesSent"])
        aead_frames.add_metric([tenant, peer, "received"], link["aeadFramesReceived"])


def add_histogram(family: HistogramMetricFamily, tenant: str, snapshot: dict) -> None:
    """A {boundsSeconds, bucketCounts (per bucket), sumSeconds} snapshot as one labelled histogram."""
    cumulative, buckets = 0, []
    for bound, count in zip([*snapshot["boundsSeconds"], math.inf], snapshot["bucketCounts"]):
        cumulative += count
        buckets.append((floatToGoString(bound), cumulative))
    family.add_metric([tenant], buckets, snapshot["sumSeconds"])


class FireLagHistogram(Collector):
    """queen_timers_fire_lag_seconds{tenant}: the series prometheus_client's labelled Histogram
    exports (buckets, count, sum, created), observed a tick's fires at a time.

    Histogram.observe takes a lock and walks the buckets once per fire: 5% of the leader's loop
    time while a million due timers drained (bench/results/profiles). A tick's lags are counted by
    value first (a burst's fires share one lag), then each distinct value finds its bucket once.
    The sum is kept in integer ms, exact, and shown in seconds."""

    NAME = "queen_timers_fire_lag_seconds"
    DOCUMENTATION = "Fire entry's now minus deliverAt, observed on the leader"

    def __init__(self, buckets_s: tuple[float, ...] = FIRE_LAG_BUCKETS_S):
        self._bounds_s = (*buckets_s, math.inf)
        self._bound_labels = [floatToGoString(bound) for bound in self._bounds_s]
        # tenant -> [count per bucket (not cumulative), sum of lags in ms, created (unix s)]
        self._series: dict[str, list] = {}
        self._lock = threading.Lock()  # observed on the loop, but a scrape may come from any thread

    def observe_many_ms(self, tenant: str, lags_ms: Iterable[float]) -> None:
        # Counted in C, then clamped per distinct value: a tick's thousands of lags share few values.
        by_value = collections.Counter(lags_ms)
        with self._lock:
            series = self._series.get(tenant)
            if series is None:  # like labels(): the series appears with the tenant's first tick
                series = self._series[tenant] = [[0] * len(self._bounds_s), 0, time.time()]
            counts = series[0]
            for lag_ms, count in by_value.items():
                lag_ms = max(0, lag_ms)
                # Histogram.observe's rule: the first bucket whose bound is >= the value.
                counts[bisect.bisect_left(self._bounds_s, lag_ms / 1000.0)] += count
                series[1] += lag_ms * count

    def snapshot(self, tenant: str) -> dict:
        """This node's histogram of one tenant as JSON: the finite upper bounds, the count in each
        bucket (not cumulative; one more than the bounds, the last past the largest), the total
        count and sum. All zero before this node has led a tick of the tenant's group."""
        with self._lock:
            series = self._series.get(tenant)
            counts, sum_ms = (list(series[0]), series[1]) if series is not None else ([0] * len(self._bounds_s), 0)
        return {"boundsSeconds": list(self._bounds_s[:-1]), "bucketCounts": counts, "count": sum(counts),
                "sumSeconds": sum_ms / 1000.0}

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self.NAME, self.DOCUMENTATION, "histogram")
        with self._lock:
            snapshot = [(tenant, list(counts), sum_ms, created) for tenant, (counts, sum_ms, created) in self._series.items()]
        for tenant, counts, sum_ms, created in snapshot:
            cumulative = 0
            for label, count in zip(self._bound_labels, counts):
                cumulative += count
                metric.add_sample(self.NAME + "_bucket", {"tenant": tenant, "le": label}, float(cumulative))
            metric.add_sample(self.NAME + "_count", {"tenant": tenant}, float(cumulative))
            metric.add_sample(self.NAME + "_sum", {"tenant": tenant}, sum_ms / 1000.0)
            metric.add_sample(self.NAME + "_created", {"tenant": tenant}, created)
        return [metric]


class ApiMetrics:
    def __init__(self, groups_source: Callable[[], Mapping[str, GroupApi]] | None = None,
                 quotas: Mapping[str, int | None] | None = None):
        self.registry = CollectorRegistry()
        self.fire_lag_seconds = FireLagHistogram()
        self.registry.register(self.fire_lag_seconds)
        self.timer_ops = Counter(
            "queen_timers_ops_total", "Timer operations answered by this node", ["tenant", "op", "status"],
            registry=self.registry,
        )
        self.schedule_rejected = Counter(
            "queen_timers_schedule_rejected_total", "Timer calls refused by this node, by error code", ["reason"],
            registry=self.registry,
        )
        # Observed on every call, on the loop thread: LoopHistogram (loop_histogram.py says why).
        self.commit_seconds = LoopHistogram(
            "queen_raft_commit_seconds", "Propose to committed-and-applied, on the proposing node",
            buckets=COMMIT_BUCKETS_S,
        )
        self.registry.register(self.commit_seconds)
        self.group_unavailable = Counter(
            "queen_raft_unavailable_total", "Calls answered 503 because the group could not commit or read in time, "
            "by reason (no_leader, timeout, leader_changed, ...)", ["tenant", "reason"], registry=self.registry,
        )
        self.fired_by_queue = Counter(
            "queen_timers_fired_by_queue_total", "Timer fires (any result) of the ticks this node led, by queue; "
            f"past {QUEUE_SERIES_PER_TENANT} queues of a tenant, the rest under queue=\"{OTHER_QUEUES}\"",
            ["tenant", "queue"], registry=self.registry,
        )
        self.http_request_seconds = LoopHistogram(
            "queen_http_request_seconds", "HTTP request duration by route and status code", ("route", "code"),
            buckets=HTTP_BUCKETS_S,
        )
        self.registry.register(self.http_request_seconds)
        if groups_source is not None:
            self.registry.register(ReplicatedStateCollector(groups_source, quotas))
        # Labelled children, each resolved once: labels() takes the family's lock and str()s every
        # value on each call (3% of a single-op schedule's loop time in the profile, 5% of a batch's,
        # where it ran once per op). The keys are bounded like the families' own: routes, status
        # codes, tenants of the config, ops, the state's statuses, error codes.
        self._http_children: dict[tuple[str, int], Any] = {}
        self._timer_op_children: dict[tuple[str, str, str], Any] = {}
        self._rejected_children: dict[str, Any] = {}
        self._fire_lag_children: dict[str, Any] = {}
        self._queue_children: dict[str, dict[str, Any]] = {}

    def observe_http_request(self, route: str, status: int, seconds: float) -> None:
        child = self._http_children.get((route, status))
        if child is None:
            child = self._http_children[(route, status)] = self.http_request_seconds.labels(route, str(status))
        child.observe(seconds)

    def count_timer_ops(self, tenant: str, ops: list[dict], answers: list[dict]) -> None:
        """One increment per (op, status) of a call, by how many of its ops ended so."""
        if len(ops) < TALLY_IN_C_FROM_OPS:
            tally: dict[tuple[str, str], int] = {}
            for op, answer in zip(ops, answers):
                key = (op["op"], answer.get("status", "?"))
                tally[key] = tally.get(key, 0) + 1
        elif len(kinds := set(map(_OP, ops))) == 1:  # one kind of op (the usual call): its statuses alone
            (kind,) = kinds
            tally = {(kind, status): count
                     for status, count in collections.Counter(map(_status_of, answers[:len(ops)])).items()}
        else:
            tally = collections.Counter(zip(map(_OP, ops), map(_status_of, answers)))
        for (op, status), count in tally.items():
            child = self._timer_op_children.get((tenant, op, status))
            if child is None:
                child = self._timer_op_children[(tenant, op, status)] = self.timer_ops.labels(
                    tenant=tenant, op=op, status=status)
            child.inc(count)

    def count_schedule_rejected(self, reason: str) -> None:
        child = self._rejected_children.get(reason)
        if child is None:
            child = self._rejected_children[reason] = self.schedule_rejected.labels(reason=reason)
        child.inc()

    def observe_tick_result(self, tenant: str, result: dict) -> None:
        """The leader's tick hook: one observation per fired timer, lag in ms on the group clock."""
        if not isinstance(result, dict):
            return
        self.fire_lag_seconds.observe_many_ms(tenant, result.get("lagsMs") or ())
        for queue, count in (result.get("firedByQueue") or {}).items():
            self._queue_child(tenant, queue).inc(count)

    def fired_by_queue_snapshot(self, tenant: str) -> dict[str, int]:
        """This node's fires of the tenant by queue (of the ticks it led), OTHER_QUEUES included once
        the tenant passed the cap."""
        family = self.fired_by_queue.collect()[0]
        return {sample.labels["queue"]: int(sample.value) for sample in family.samples
                if sample.name.endswith("_total") and sample.labels["tenant"] == tenant}

    def _queue_child(self, tenant: str, queue: str):
        """The queue's series while the tenant has fewer than QUEUE_SERIES_PER_TENANT, else the
        shared OTHER_QUEUES one (a queue seen before keeps its own)."""
        children = self._queue_children.setdefault(tenant, {})
        child = children.get(queue)
        if child is None:
            if len(children) >= QUEUE_SERIES_PER_TENANT:
                return self.fired_by_queue.labels(tenant=tenant, queue=OTHER_QUEUES)
            child = children[queue] = self.fired_by_queue.labels(tenant=tenant, queue=queue)
        return child

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

