"""The timer routes over a real app and a real TenantState: shapes, statuses, gates in the order of
docs/spec.md section 2."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.api.timer_parsing import SERVER_OWNED_FIELDS, _parse_timer_op_checked, parse_timer_op, parse_timer_ops
from queen_raft.api.errors import ApiError
from queen_raft.raft import GroupUnavailable
from test_api_fake_group import START_MS, ApiHarness

PAYLOAD = base64.b64encode(b'{"hi":1}').decode()


def schedule(key: str = "k1", queue: str = "q", **fields) -> dict:
    op = {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 300, "txn": f"txn-{key}", "payload": PAYLOAD}
    op.update(fields)
    return op


def cancel(key: str = "k1", queue: str = "q", **fields) -> dict:
    return {"op": "cancel", "queue": queue, "timerKey": key, **fields}


# --- shape: every 400 of docs/spec.md section 2 ----------------------------------------------------------

def _without(op: dict, name: str) -> dict:
    return {k: v for k, v in op.items() if k != name}


BAD_BODIES = {
    "not an array or object": "schedule",
    "operations not an array": {"operations": {"op": "schedule"}},
    "operations missing": {"ops": []},
    "unknown top-level field": {"operations": [schedule()], "tenant": "globex"},
    "empty batch": {"operations": []},
    "op not an object": [1],
    "op missing": [_without(schedule(), "op")],
    "unknown op": [schedule(op="upsert")],
    "queue missing": [_without(schedule(), "queue")],
    "queue empty": [schedule(queue="")],
    "timerKey missing": [_without(schedule(), "timerKey")],
    "timerKey not a string": [schedule(timerKey=7)],
    "delayMs missing": [_without(schedule(), "delayMs")],
    "delayMs a float": [schedule(delayMs=300.0)],
    "delayMs a string": [schedule(delayMs="300")],
    "delayMs a bool": [schedule(delayMs=True)],
    "delayMs past 2^53": [schedule(delayMs=-(2**70))],
    "delayMs negative": [schedule(delayMs=-1)],
    "txn missing": [_without(schedule(), "txn")],
    "txn not a string": [schedule(txn=5)],
    "payload missing": [_without(schedule(), "payload")],
    "payload not base64": [schedule(payload="not base64!")],
    "payload bad padding": [schedule(payload="eyJ")],
    "payload not a string": [schedule(payload={"hi": 1})],
    "partition empty": [schedule(partition="")],
    "payloadZstd not a bool": [schedule(payloadZstd="yes")],
    "unknown field": [schedule(color="red")],
    "cancel with a schedule field": [cancel(delayMs=5)],
    "cancel txn not a string": [cancel(txn=1)],
    "duplicate key": [schedule("k"), cancel("k")],
    "duplicate key two schedules": [schedule("k"), schedule("k", delayMs=5)],
    "underscore field": [schedule(_internal=1)],
    **{f"server-owned {name}": [schedule(**{name: "x"})] for name in sorted(SERVER_OWNED_FIELDS)},
    "server-owned on a cancel": [cancel(producerSub="billing-service")],
    "over the op cap": [schedule(f"k{i}") for i in range(257)],
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_parse_refuses_every_bad_shape(case):
    with pytest.raises(ApiError) as refused:
        parse_timer_ops(BAD_BODIES[case], max_ops=256)
    assert (refused.value.status, refused.value.code) == (400, "timers_bad_request")


def test_parse_accepts_a_bare_array_and_fills_defaults():
    ops = parse_timer_ops([schedule(), cancel("k2"), schedule("k3", op="reschedule", delayMs=0, payloadZstd=True)], 256)
    assert ops[0] == {"op": "schedule", "queue": "q", "timerKey": "k1", "partition": "Default", "delayMs": 300,
                      "txn": "txn-k1", "payload": b'{"hi":1}', "payloadZstd": False, "encrypted": False}
    assert ops[1] == {"op": "cancel", "queue": "q", "timerKey": "k2", "txn": None}
    assert ops[2]["delayMs"] == 0 and ops[2]["payloadZstd"] is True


def test_parse_takes_exactly_the_cap():
    assert len(parse_timer_ops({"operations": [schedule(f"k{i}") for i in range(256)]}, 256)) == 256


@pytest.mark.parametrize("case", ["server-owned producerSub", "duplicate key", "payload not base64", "over the op cap"])
async def test_http_400_changes_nothing(case):
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json={"operations": [schedule("kept")]})
        assert status == 200
        status, _, body = await api.call("POST", "/api/v1/timers", json=BAD_BODIES[case])
        assert status == 400 and body["error"] == "timers_bad_request" and body["message"]
        assert len(api.groups["acme"].writes()) == 1
        assert api.groups["acme"].state.counters()["pendingTimers"] == 1


async def test_invalid_json_and_empty_body_are_400():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", data=b"{not json")
        assert (status, body["error"]) == (400, "timers_bad_request")
        status, _, body = await api.call("POST", "/api/v1/timers", data=b"")
        assert (status, body["error"]) == (400, "timers_bad_request")
        assert api.groups["acme"].writes() == []


# --- statuses ----------------------------------------------------------------------------------

async def test_schedule_reschedule_cancel_absent_in_input_order():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json={"operations": [schedule("a"), schedule("b", delayMs=1000)]})
        assert status == 200
        first, second = body["results"]
        assert first == {"ok": True, "status": "scheduled", "queue": "q", "timerKey": "a", "txn": "txn-a",
                         "messageId": first["messageId"], "deliverAt": START_MS + 300}
        assert second["deliverAt"] == START_MS + 1000 and second["messageId"] != first["messageId"]
        status, _, body = await api.call("POST", "/api/v1/timers", json=[
            schedule("a", op="reschedule", txn="txn-a2", delayMs=50), cancel("b", txn="txn-b"), cancel("never")])
        assert [r["status"] for r in body["results"]] == ["rescheduled", "cancelled", "absent"]
        assert [r["ok"] for r in body["results"]] == [True, True, False]
        assert body["results"][0]["txn"] == "txn-a2" and body["results"][0]["messageId"] != first["messageId"]
        assert body["results"][1]["txn"] == "txn-b"


async def test_producer_sub_is_the_tokens_and_message_ids_are_uuid7():
    async with ApiHarness() as api:
        _, _, body = await api.call("POST", "/api/v1/timers", token="acme-wo", json=[schedule()])
        message_id = body["results"][0]["messageId"]
        assert message_id[14] == "7"  # version nibble of a UUIDv7
        command = api.groups["acme"].writes()[0]
        assert command["producerSub"] == api.serving.config.find_token("acme-wo").sub
        [group] = command["ops"]  # a call of plain schedules is one schedule_rows group
        assert group["op"] == "schedule_rows"
        assert group["rows"] == [["q", "k1", "Default", 300, "txn-k1", message_id, b'{"hi":1}', False, False]]


async def test_delete_route_cancels_echoes_txn_and_answers_fired_after_the_fire():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("tenant/42", txn="t-42")])
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/tenant/42?txn=t-42")
        assert (status, body) == (200, {"ok": True, "status": "cancelled", "queue": "q", "timerKey": "tenant/42", "txn": "t-42",
                                        "requestTxn": "t-42"})
        await api.call("POST", "/api/v1/timers", json=[schedule("f", txn="t-f")])
        api.groups["acme"].advance(300)
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/f?txn=t-f")
        assert (status, body["ok"], body["status"], body["txn"], body["requestTxn"]) == (200, False, "fired", "t-f", "t-f")


async def test_cancel_of_another_tenants_timer_is_absent():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", token="globex-rw", json=[schedule("shared")])
        status, _, body = await api.call("DELETE", "/api/v1/timers/q/shared", token="acme-rw")
        assert (status, body["status"], body["ok"]) == (200, "absent", False)
        assert api.groups["globex"].state.counters()["pendingTimers"] == 1


async def test_peek_and_list():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("b"), schedule("a/1", partition="p1"), schedule("c")])
        status, _, peek = await api.call("GET", "/api/v1/timers/q/a/1", token="acme-ro")
        assert status == 200
        assert set(peek) == {"found", "status", "queue", "timerKey", "partition", "deliverAt", "dueAt", "txn", "messageId", "payload",
                             "payloadZstd", "encrypted", "producerSub", "attempts", "lastError", "claimed",
                             "createdAt", "updatedAt"}
        assert (peek["found"], peek["partition"], peek["payload"], peek["claimed"]) == (True, "p1", PAYLOAD, False)
        status, _, miss = await api.call("GET", "/api/v1/timers/q/none", token="acme-ro")
        assert (status, miss) == (200, {"found": False, "status": "absent", "queue": "q", "timerKey": "none"})
        status, _, page = await api.call("GET", "/api/v1/timers/q?limit=2", token="acme-ro")
        assert [r["timerKey"] for r in page["rows"]] == ["a/1", "b"] and page["truncated"] is True
        assert all("payload" not in r for r in page["rows"])
        _, _, rest = await api.call("GET", f"/api/v1/timers/q?after={page['nextAfter']}&limit=0", token="acme-ro")
        assert [r["timerKey"] for r in rest["rows"]] == ["c"]  # limit 0 is clamped to 1
        status, _, body = await api.call("GET", "/api/v1/timers/q?limit=many", token="acme-ro")
        assert (status, body["error"]) == (400, "timers_bad_request")


async def test_url_decoding_applies_once():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[schedule("a%2Fb"), schedule("x y")])
        _, _, body = await api.call("GET", "/api/v1/timers/q/a%252Fb", token="acme-ro")
        assert body["found"] is True and body["timerKey"] == "a%2Fb"
        _, _, body = await api.call("GET", "/api/v1/timers/q/x%20y", token="acme-ro")
        assert body["found"] is True


# --- access --------------------------------------------------------------------------------------

ACCESS = [
    # method, path, allowed levels
    ("POST", "/api/v1/timers", {"admin", "read-write", "write-only"}),
    ("DELETE", "/api/v1/timers/q/k1", {"admin", "read-write"}),
    ("GET", "/api/v1/timers/q/k1", {"admin", "read-write", "read-only"}),
    ("GET", "/api/v1/timers/q", {"admin", "read-write", "read-only"}),
]


@pytest.mark.parametrize("method,path,allowed", ACCESS)
async def test_levels_401_and_403(method, path, allowed):
    async with ApiHarness() as api:
        body = [schedule()] if method == "POST" else None
        for token in (None, "wrong-token"):
            status, _, answer = await api.call(method, path, token=token, json=body)
            assert (status, answer["error"]) == (401, "unauthorized")
        for level, token in {"admin": "acme-admin", "read-write": "acme-rw", "read-only": "acme-ro", "write-only": "acme-wo"}.items():
            status, _, answer = await api.call(method, path, token=token, json=body)
            if level in allowed:
                assert status == 200, (level, answer)
            else:
                assert (status, answer["error"]) == (403, "forbidden"), level


async def test_auth_comes_before_shape():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", token="acme-ro", json=[{"bad": 1}])
        assert (status, body["error"]) == (403, "forbidden")
        status, _, body = await api.call("POST", "/api/v1/timers", token=None, data=b"{")
        assert (status, body["error"]) == (401, "unauthorized")


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


# --- the plain-schedule shortcut of parse_timer_op answers what the checked path does -------------

class _Text(str):
    """A str subclass: not what JSON gives, but the checked path takes it."""


_FIELD_VALUES = st.one_of(
    st.sampled_from(["", "q", "k", "schedule", "reschedule", "cancel", PAYLOAD, "eyJ", "é", "not base64!", _Text("q")]),
    st.integers(min_value=-(2**54), max_value=2**54), st.sampled_from([0, 300, 2**53 - 1, 2**53, -(2**53) + 1]),
    st.booleans(), st.none(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=1),
)
_FIELD_NAMES = st.sampled_from(["op", "queue", "timerKey", "delayMs", "txn", "payload", "partition", "payloadZstd",
                                "encrypted", "color", "messageId", "_x"])


def _outcome(parse, raw):
    try:
        return "op", parse(raw)
    except ApiError as error:
        return "refused", (error.status, error.code, error.message)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.dictionaries(_FIELD_NAMES, _FIELD_VALUES, max_size=2).map(lambda f: dict(schedule(), **f)),
                 st.dictionaries(_FIELD_NAMES, _FIELD_VALUES, max_size=10)))
def test_parse_timer_op_answers_what_the_checked_path_answers(raw):
    """A valid schedule with one or two fields changed, or any mix of fields."""
    assert _outcome(lambda r: parse_timer_op(r, 3), raw) == _outcome(lambda r: _parse_timer_op_checked(r, "operations[3]"), raw)


@pytest.mark.parametrize("body, message_part", [
    # Integers past 64 bits (orjson alone reads them as floats): the message shows the exact value.
    (b'{"operations":[{"op":"schedule","queue":"q","timerKey":"k","delayMs":18446744073709551616,'
     b'"txn":"t","payload":"e30="}]}', "got 18446744073709551616"),
    (b'[{"op":"schedule","queue":"q","timerKey":"k","delayMs":-100000000000000000000000,'
     b'"txn":"t","payload":"e30="}]', "got -100000000000000000000000"),
    # A body orjson refuses (a BOM) and the stdlib reads: still parsed, then refused for its op.
    (b'\xef\xbb\xbf[{"op":"upsert"}]', "op 'upsert' is not one of"),
])
async def test_a_body_read_exactly_gets_the_exact_refusal(body, message_part):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/timers", data=body)
        assert (status, answer["error"]) == (400, "timers_bad_request")
        assert message_part in answer["message"]
        assert api.groups["acme"].writes() == []


async def test_plain_schedules_with_a_wide_integer_elsewhere_in_the_body_are_not_plain():
    async with ApiHarness() as api:
        body = (b'{"operations":[{"op":"schedule","queue":"q","timerKey":"k","delayMs":300,"txn":"t",'
                b'"payload":"e30=","partition":99999999999999999999999}]}')
        status, _, answer = await api.call("POST", "/api/v1/timers", data=body)
        assert (status, answer["error"]) == (400, "timers_bad_request")
        assert "partition must be a non-empty string" in answer["message"]


def test_plain_schedule_key_orders_are_remembered_within_their_bound():
    from itertools import islice, permutations

    from queen_raft.api import timer_parsing

    names = ("op", "queue", "timerKey", "delayMs", "txn", "payload")
    good = schedule()
    for order in islice(permutations(names), timer_parsing.SCHEDULE_SHAPES_KEPT * 2):
        assert timer_parsing.plain_schedules([{name: good[name] for name in order}]) is not None
        assert len(timer_parsing._SCHEDULE_SHAPES) <= timer_parsing.SCHEDULE_SHAPES_KEPT
    # A remembered order says nothing of another key set: an unknown field is still not plain, and
    # refused by the checked path.
    assert timer_parsing.plain_schedules([good]) is not None
    assert timer_parsing.plain_schedules([dict(good, extra=1)]) is None
    with pytest.raises(ApiError, match="unknown field"):
        parse_timer_ops([dict(good, extra=1)], 10)
