"""The timer routes over a real app and a real TenantState, the shapes: every 400 of docs/spec.md
section 2, and the plain-schedule shortcut of parse_timer_op answering what the checked path does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.api.timer_parsing import SERVER_OWNED_FIELDS, _parse_timer_op_checked, parse_timer_op, parse_timer_ops
from queen_raft.api.errors import ApiError
from test_api_fake_group import ApiHarness
from timer_bodies import PAYLOAD, cancel, schedule


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
