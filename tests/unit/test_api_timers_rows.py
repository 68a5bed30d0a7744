"""POST /api/v1/timers of plain schedules only takes its own path (`_schedule_plain`: the ops parsed
straight into one schedule_rows group). The same requests through the general path (per-op maps)
must answer the same: statuses, error codes, messages, headers, results, metrics, stored timers."""

from __future__ import annotations

import base64

import pytest

from queen_raft.api import timer_parsing
from queen_raft.api import timers as timers_route
from test_api_fake_group import ApiHarness

PAYLOAD = base64.b64encode(b'{"hi":1}').decode()
ENCRYPTION_ENV = {"QUEEN_ENCRYPTION_KEY": "11" * 32}
# Answer headers that differ from one request to the next whatever the path.
VOLATILE_HEADERS = {"Date", "Content-Length", "Server"}


def schedule(key: str, queue: str = "q", **fields) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 300, "txn": f"txn-{key}", "payload": PAYLOAD,
            **fields}


def without_message_ids(body):
    if isinstance(body, dict) and "results" in body:
        return {**body, "results": [{k: v for k, v in r.items() if k != "messageId"} for r in body["results"]]}
    return body


async def answers(general: bool, env: dict[str, str], requests: list, monkeypatch) -> tuple[list, list]:
    """(answers, proposed commands) of the requests, on a fresh harness; `general` takes every call
    through the general path."""
    with monkeypatch.context() as patch:
        if general:
            patch.setattr(timers_route, "plain_schedules", lambda raw_ops: None)
        async with ApiHarness(env=env) as api:
            # The rate limiter's clock stands still: both paths must meet the same bucket, however
            # slowly a loaded machine runs the calls.
            api.serving.timer_rate.monotonic = lambda: 1000.0
            out = []
            for request in requests:
                if callable(request):
                    await request(api)
                    continue
                status, headers, body = await api.call("POST", "/api/v1/timers", json=request)
                headers = {k: v for k, v in headers.items() if k not in VOLATILE_HEADERS}
                out.append((status, headers, without_message_ids(body)))
            _, _, metrics = await api.call("GET", "/metrics", token=None)
            out.append(sorted(line for line in metrics.splitlines() if line.startswith("queen_timers_")
                              and "_created" not in line))
            rows = api.groups["acme"].state.list_timers("q", limit=1000)["rows"]
            out.append([{k: v for k, v in row.items() if k != "messageId"} for row in rows])
            return out, api.groups["acme"].writes()


async def pause(api: ApiHarness) -> None:
    await api.groups["acme"].propose({"op": "admin", "action": "pause"})


async def configure_encrypted(api: ApiHarness) -> None:
    status, _, _ = await api.call("POST", "/api/v1/configure", json={"queue": "secret", "options": {"encryptionEnabled": True}})
    assert status == 200


CASES = {
    "statuses and defaults": ({}, [
        [schedule("a"), schedule("b", delayMs=0, partition="p1", txn="b")],
        {"operations": [schedule("a", op="reschedule", delayMs=9), schedule("c", payloadZstd=False, encrypted=True)]},
    ]),
    "a duplicate key": ({}, [[schedule("x")], [schedule("a"), schedule("b"), schedule("a", delayMs=1)]]),
    "horizon before payload, first op to blame": ({"QUEEN_TIMERS_MAX_HORIZON_S": "10", "QUEEN_TIMERS_MAX_PAYLOAD_BYTES": "4"}, [
        [schedule("ok", delayMs=10_000, payload=base64.b64encode(b"1234").decode()), schedule("big"),
         schedule("far", delayMs=10_001), schedule("far2", delayMs=10_002)],
        [schedule("ok", delayMs=10_000, payload=base64.b64encode(b"1234").decode()),
         schedule("far", delayMs=10_001, payload=base64.b64encode(b"1234").decode())],
        [schedule("ok", payload=base64.b64encode(b"1234").decode()), schedule("five", payload=base64.b64encode(b"12345").decode())],
        [schedule("ok", delayMs=10_000, payload=base64.b64encode(b"1234").decode()), schedule("big"), schedule("big2")],
        [schedule("ok", delayMs=10_000, payload=base64.b64encode(b"1234").decode())],
    ]),
    "paused": ({}, [[schedule("a")], pause, [schedule("b"), schedule("c")]]),
    "rate limited": ({"QUEEN_TIMERS_RATE": "1", "QUEEN_TIMERS_RATE_BURST": "2"}, [
        [schedule("a")], [schedule("b")], [schedule("c")]]),
    "quota": ({"QUEEN_TIMERS_MAX_PENDING": "2"}, [[schedule("a")], [schedule("b"), schedule("c")], [schedule("a", delayMs=1)]]),
    "an encrypting queue": (ENCRYPTION_ENV, [
        configure_encrypted, [schedule("x", queue="secret", encrypted=True)], [schedule("y", queue="secret"), schedule("z")]]),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_plain_path_answers_as_the_general_path(case, monkeypatch):
    env, requests = CASES[case]
    plain, plain_commands = await answers(False, env, requests, monkeypatch)
    general, general_commands = await answers(True, env, requests, monkeypatch)
    assert plain == general
    # the calls the plain path proposed hold one group each (or, to an encrypting queue, maps)
    timers_commands = [c for c in plain_commands if c["op"] == "timers"]
    assert timers_commands and len(timers_commands) == len([c for c in general_commands if c["op"] == "timers"])
    if case != "an encrypting queue":
        assert all([op["op"] for op in c["ops"]] == ["schedule_rows"] for c in timers_commands)


async def test_plain_schedules_get_distinct_uuid7_message_ids_that_the_timers_keep():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/timers", json=[schedule(f"k{i}") for i in range(256)])
        assert status == 200
        ids = [r["messageId"] for r in body["results"]]
        assert len(set(ids)) == 256 and all(i[14] == "7" for i in ids)
        state = api.groups["acme"].state
        assert [state.peek_timer("q", f"k{i}")["messageId"] for i in range(256)] == ids
        [command] = api.groups["acme"].writes()
        assert [row[5] for row in command["ops"][0]["rows"]] == ids


@pytest.mark.parametrize("ops", [
    [schedule("a"), {"op": "cancel", "queue": "q", "timerKey": "b"}],
    [schedule("a"), schedule("b", payload="not base64!")],
    [schedule("a"), schedule("b", color="red")],
    [schedule("a"), schedule("b", delayMs=1.5)],
    [schedule("a"), schedule("b", delayMs=-1)],
    [schedule("a"), schedule("b", partition="")],
    [schedule("a"), schedule("b", txn="")],
    [schedule("a"), schedule("b", encrypted="yes")],
    [schedule("a"), "not an op"],
])
def test_a_call_with_any_op_not_a_plain_schedule_takes_the_general_path(ops):
    assert timer_parsing.plain_schedules(ops) is None


def test_a_plain_call_is_the_rows_of_its_ops():
    plain = timer_parsing.plain_schedules([schedule("a"), schedule("b", queue="r", partition="p", delayMs=0, payloadZstd=True)])
    rows = [row[:5] + row[6:] for row in plain.rows]  # the messageIds aside
    assert rows == [["q", "a", "Default", 300, "txn-a", b'{"hi":1}', False, False],
                    ["r", "b", "p", 0, "txn-b", b'{"hi":1}', True, False]]
    assert plain.queues == {"q", "r"}
    assert plain.as_ops() == timer_parsing.parse_timer_ops([schedule("a"), schedule("b", queue="r", partition="p", delayMs=0, payloadZstd=True)], 256)
