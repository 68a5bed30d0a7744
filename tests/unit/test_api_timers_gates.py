"""The timer routes over a real app and a real TenantState, the gates after the shape in the order
of docs/spec.md section 2 (pause, rate, quota, horizon, size, leader), and the metrics they and the
fires feed."""

from __future__ import annotations

import base64

import pytest

from queen_raft.raft import GroupUnavailable
from test_api_fake_group import ApiHarness
from timer_bodies import PAYLOAD, cancel, schedule


# --- gates after the shape, in the order of docs/spec.md section 2 -------------------------------

async def pause(api: ApiHarness, tenant: str = "acme") -> None:
    await api.groups[tenant].propose({"op": "admin", "action": "pause"})


async def test_paused_is_503_with_retry_after_and_hint_and_delete_passes():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("k")])
        await pause(api)
        status, headers, body = await api.call("POST", "/api/v1/timers", json=[schedule("new"), cancel("k")])
        assert (status, body["error"]) == (503, "timers_disabled")
        assert int(headers["Retry-After"]) >= 1
        assert headers["x-queen-timers-hint"] == "DELETE /api/v1/timers/q/k"
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/k")
        assert (status, body["status"]) == (200, "cancelled")


async def test_shape_is_checked_before_the_pause():
    async with ApiHarness() as api:
        await pause(api)
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(messageId="m")])
        assert (status, body["error"]) == (400, "timers_bad_request")


async def test_rate_limit_429_with_retry_after_hint_and_delete_passes():
    async with ApiHarness(env={"QUEEN_TIMERS_RATE": "1", "QUEEN_TIMERS_RATE_BURST": "2"}) as api:
        for key in ("a", "b"):
            status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule(key)])
            assert status == 200
        status, headers, body = await api.call("POST", "/api/v1/timers", json=[cancel("a/x")])
        assert (status, body["error"]) == (429, "rate_limited")
        assert int(headers["Retry-After"]) >= 1
        assert headers["x-queen-timers-hint"] == "DELETE /api/v1/timers/q/a/x"
        # another tenant has its own bucket; the DELETE route takes no token
        status, _, _ = await api.call("POST", "/api/v1/timers", token="globex-rw", json=[schedule("a")])
        assert status == 200
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/a")
        assert (status, body["status"]) == (200, "cancelled")


async def test_pause_answers_before_the_rate_and_spends_no_token():
    async with ApiHarness(env={"QUEEN_TIMERS_RATE": "1", "QUEEN_TIMERS_RATE_BURST": "1"}) as api:
        await pause(api)
        for _ in range(3):
            status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule()])
            assert (status, body["error"]) == (503, "timers_disabled")
        await api.groups["acme"].propose({"op": "admin", "action": "resume"})
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule()])
        assert status == 200


async def test_quota_is_403_from_the_state_whole_batch_refused_with_hint():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_PENDING": "2"}) as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("a"), schedule("b")])
        status, headers, body = await api.call("POST", "/api/v1/timers", json=[cancel("a"), schedule("c"), schedule("d")])
        assert (status, body["error"]) == (403, "timers_quota_exceeded")
        assert headers["x-queen-timers-hint"] == "DELETE /api/v1/timers/q/a"
        assert api.groups["acme"].state.peek_timer("q", "a") is not None  # the cancel in it did not apply
        # replacing is never refused by the quota, and DELETE passes it
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule("a", delayMs=9)])
        assert (status, body["results"][0]["status"]) == (200, "rescheduled")
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/b")
        assert body["status"] == "cancelled"


async def test_horizon_403_and_payload_413_refuse_the_whole_batch():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_HORIZON_S": "10", "QUEEN_TIMERS_MAX_PAYLOAD_BYTES": "8"}) as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule("ok", delayMs=10_000, payload=PAYLOAD[:8]), schedule("far", delayMs=10_001)])
        assert (status, body["error"]) == (403, "timer_horizon_exceeded")
        big = base64.b64encode(b"123456789").decode()
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule("ok", payload=base64.b64encode(b"12345678").decode()), schedule("big", payload=big)])
        assert (status, body["error"]) == (413, "payload_too_large")
        assert api.groups["acme"].writes() == []
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[schedule("ok", delayMs=10_000, payload=base64.b64encode(b"12345678").decode())])
        assert status == 200


async def test_body_over_the_http_ceiling_is_413():
    async with ApiHarness(env={"QUEEN_HTTP_MAX_BODY_BYTES": "2048"}) as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(payload=base64.b64encode(b"x" * 4096).decode())])
        assert (status, body["error"]) == (413, "payload_too_large")


async def test_no_leader_is_503_timers_unavailable_with_retry_after_on_every_route():
    async with ApiHarness() as api:
        api.groups["acme"].unavailable = GroupUnavailable("no_leader", retry_after_s=1.5)
        for method, path, body in [("POST", "/api/v1/timers", [schedule()]), ("DELETE", "/api/v1/timers/q/k", None),
                                   ("GET", "/api/v1/timers/q/k", None), ("GET", "/api/v1/timers/q", None)]:
            status, headers, answer = await api.call(method, path, json=body)
            assert (status, answer["error"], headers["Retry-After"]) == (503, "timers_unavailable", "2"), path


async def test_rejections_and_ops_are_counted_in_metrics():
    async with ApiHarness(env={"QUEEN_TIMERS_MAX_HORIZON_S": "1"}) as api:
        await api.call("POST", "/api/v1/timers", json=[schedule(delayMs=5000)])
        await api.call("POST", "/api/v1/timers", json=[schedule(tenant="x")])
        await api.call("POST", "/api/v1/timers", json=[schedule()])
        status, _, text = await api.call("GET", "/metrics", token=None)
        assert status == 200
        assert 'queen_timers_schedule_rejected_total{reason="timer_horizon_exceeded"} 1.0' in text
        assert 'queen_timers_schedule_rejected_total{reason="timers_bad_request"} 1.0' in text
        assert 'queen_timers_ops_total{op="schedule",status="scheduled",tenant="acme"} 1.0' in text
        assert 'queen_timers_pending{tenant="acme"} 1.0' in text
        assert 'queen_billed_messages_total{tenant="acme"} 1.0' in text
        assert 'queen_raft_is_leader{tenant="acme"} 1.0' in text
        assert 'queen_http_request_seconds_count{code="403",route="/api/v1/timers"} 1.0' in text


def test_fire_lag_histogram_is_fed_from_tick_results():
    from queen_raft.api.metrics import ApiMetrics

    metrics = ApiMetrics()
    metrics.observe_tick_result("acme", {"lagsMs": [3, 12]})
    text = metrics.exposition().decode()
    assert 'queen_timers_fire_lag_seconds_count{tenant="acme"} 2.0' in text
    assert 'queen_timers_fire_lag_seconds_bucket{le="0.005",tenant="acme"} 1.0' in text


def test_fire_lag_histogram_exports_what_a_prometheus_histogram_would():
    """Ticks observed in bulk export the series prometheus_client's Histogram exports for the same
    lags one at a time: every bucket on its bound (a lag exactly on one included), the count, the
    sum, negative lags counted as 0; a tenant's series appears with its first tick."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from queen_raft.api.metrics import FIRE_LAG_BUCKETS_S, ApiMetrics

    reference_registry = CollectorRegistry()
    reference = Histogram("queen_timers_fire_lag_seconds", "Fire entry's now minus deliverAt, observed on the leader",
                          ["tenant"], buckets=FIRE_LAG_BUCKETS_S, registry=reference_registry)
    metrics = ApiMetrics()
    on_bounds = [int(bound * 1000) for bound in FIRE_LAG_BUCKETS_S if bound * 1000 == int(bound * 1000)]
    ticks = [[7] * 256, on_bounds, [-4, 0, 1, 2, 3, 16, 99, 61_000, 1_000_000], [], [15, 15, 14, 40, 41]]
    for lags in ticks:
        for lag_ms in lags:
            reference.labels(tenant="acme").observe(max(0, lag_ms) / 1000.0)
        metrics.observe_tick_result("acme", {"lagsMs": lags})

    def series(text: str) -> dict[str, float]:
        found = {}
        for line in text.splitlines():
            if line.startswith("queen_timers_fire_lag_seconds_") and "_created" not in line:
                name, value = line.rsplit(" ", 1)
                found[name] = float(value)
        return found

    ours, theirs = series(metrics.exposition().decode()), series(generate_latest(reference_registry).decode())
    assert set(ours) == set(theirs) and len(ours) == len(FIRE_LAG_BUCKETS_S) + 3  # +Inf, count, sum
    for name, value in theirs.items():
        assert ours[name] == pytest.approx(value, rel=1e-12), name
    assert 'queen_timers_fire_lag_seconds_created{tenant="acme"}' in metrics.exposition().decode()
    assert 'tenant="globex"' not in metrics.exposition().decode()


def test_timer_op_counts_are_tallied_per_op_and_status():
    from queen_raft.api.metrics import ApiMetrics

    metrics = ApiMetrics()
    ops = [{"op": "schedule"}, {"op": "schedule"}, {"op": "cancel"}, {"op": "reschedule"}]
    answers = [{"status": "scheduled"}, {"status": "rescheduled"}, {"status": "absent"}, {"status": "rescheduled"}]
    metrics.count_timer_ops("acme", ops, answers)
    metrics.count_timer_ops("acme", ops[:1], answers[:1])
    metrics.count_schedule_rejected("rate_limited")
    metrics.count_schedule_rejected("rate_limited")
    metrics.observe_http_request("/api/v1/timers", 200, 0.002)
    text = metrics.exposition().decode()
    assert 'queen_timers_ops_total{op="schedule",status="scheduled",tenant="acme"} 2.0' in text
    assert 'queen_timers_ops_total{op="schedule",status="rescheduled",tenant="acme"} 1.0' in text
    assert 'queen_timers_ops_total{op="reschedule",status="rescheduled",tenant="acme"} 1.0' in text
    assert 'queen_timers_ops_total{op="cancel",status="absent",tenant="acme"} 1.0' in text
    assert 'queen_timers_schedule_rejected_total{reason="rate_limited"} 2.0' in text
    assert 'queen_http_request_seconds_bucket{code="200",le="0.0025",route="/api/v1/timers"} 1.0' in text
