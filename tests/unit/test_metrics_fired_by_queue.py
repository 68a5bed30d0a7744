"""queen_timers_fired_by_queue_total{tenant,queue}: the fires of the ticks a node led, by queue, with
at most QUEUE_SERIES_PER_TENANT queue series per tenant (the rest under OTHER_QUEUES)."""

from __future__ import annotations

from queen_raft.api.metrics import OTHER_QUEUES, QUEUE_SERIES_PER_TENANT, ApiMetrics
from queen_raft.node import _tick_result_observer


def samples(metrics: ApiMetrics) -> dict[tuple[str, str], float]:
    found = {}
    for line in metrics.exposition().decode().splitlines():
        if line.startswith("queen_timers_fired_by_queue_total{"):
            labels, value = line[len("queen_timers_fired_by_queue_total{"):].rsplit("} ", 1)
            pairs = dict(part.split("=", 1) for part in labels.split(","))
            found[(pairs["tenant"].strip('"'), pairs["queue"].strip('"'))] = float(value)
    return found


def test_the_leaders_tick_hook_counts_fires_by_queue_and_tenant():
    metrics = ApiMetrics()
    observe = _tick_result_observer(metrics, "acme")
    observe({"fired": 3, "firedByQueue": {"payments": 2, "emails": 1}, "lagsMs": [1, 2, 3]}, [1, 2, 3])
    observe({"fired": 1, "firedByQueue": {"payments": 1}, "lagsMs": [4]}, [4])
    _tick_result_observer(metrics, "globex")({"fired": 1, "firedByQueue": {"payments": 1}}, [0])
    assert samples(metrics) == {("acme", "payments"): 3.0, ("acme", "emails"): 1.0, ("globex", "payments"): 1.0}


def test_queues_past_the_cap_share_one_series_and_known_queues_keep_theirs():
    metrics = ApiMetrics()
    named = {f"q{i:03d}": 1 for i in range(QUEUE_SERIES_PER_TENANT)}
    metrics.observe_tick_result("acme", {"lagsMs": [], "firedByQueue": named})
    metrics.observe_tick_result("acme", {"lagsMs": [], "firedByQueue": {"late-1": 2, "late-2": 3, "q000": 5}})
    found = samples(metrics)
    assert len(found) == QUEUE_SERIES_PER_TENANT + 1
    assert found[("acme", OTHER_QUEUES)] == 5.0
    assert found[("acme", "q000")] == 6.0
    assert ("acme", "late-1") not in found
    # The cap is per tenant: another tenant's queues get series of their own.
    metrics.observe_tick_result("globex", {"lagsMs": [], "firedByQueue": {"late-1": 1}})
    assert samples(metrics)[("globex", "late-1")] == 1.0


def test_a_tick_without_fires_by_queue_counts_nothing():
    metrics = ApiMetrics()
    metrics.observe_tick_result("acme", {"lagsMs": [5]})
    _tick_result_observer(metrics, "acme")({"fired": 0}, [])
    assert samples(metrics) == {}
