"""A push call whose items are all plain is read straight into the command's rows
(api/push_parsing.py): the same rows, answers and refusals as the checked path's."""

from __future__ import annotations

import base64

import orjson
import pytest

from queen_raft.api import messages, push_parsing
from queen_raft.api.errors import ApiError
from queen_raft.state.limits import MAX_NAME_BYTES
from test_api_fake_group import ApiHarness

B64 = base64.b64encode(b"\x00payload\xff").decode()
PLAIN_ITEMS = [
    {"queue": "jobs", "payloadB64": B64},
    {"queue": "jobs", "payloadB64": B64, "transactionId": "t-1", "partition": "eu", "traceId": "tr"},
    {"payloadB64": "", "traceId": None, "queue": "q\u00e9"},
]


def checked_rows(items: list[dict], message_ids: list[str]) -> list[list]:
    rows = []
    for index, (raw, message_id) in enumerate(zip(items, message_ids)):
        item = messages.parse_push_item(raw, f"items[{index}]", message_id=message_id)
        rows.append([item[field] for field in push_parsing.PUSH_ROW_FIELDS])
    return rows


def test_plain_items_become_the_rows_the_checked_path_makes():
    ids = ["m-0", "m-1", "m-2"]
    assert push_parsing.plain_push_rows(PLAIN_ITEMS, ids) == checked_rows(PLAIN_ITEMS, ids)


@pytest.mark.parametrize("raw", [
    {"queue": "jobs", "payload": {"n": 1}},  # a JSON payload: stored as its JSON text, the checked way
    {"queue": "jobs", "payloadB64": "not base64!"},
    {"queue": "jobs", "payloadB64": B64, "partition": ""},
    {"queue": "jobs", "payloadB64": B64, "transactionId": None},
    {"queue": "jobs", "payloadB64": B64, "traceId": ""},
    {"queue": "jobs", "payloadB64": B64, "traceId": 7},
    {"queue": "j" * (MAX_NAME_BYTES // 4 + 1), "payloadB64": B64},  # long enough to need the byte count
    {"queue": "jobs", "payloadB64": B64, "messageId": "m"},
    {"queue": 7, "payloadB64": B64},
    {"payloadB64": B64},
    ["not", "a", "map"],
])
def test_an_item_that_is_not_plain_sends_the_call_the_checked_way(raw):
    assert push_parsing.plain_push_rows([PLAIN_ITEMS[0], raw], ["m-0", "m-1"]) is None


@pytest.mark.parametrize("raw, words", [
    ({"queue": "jobs", "payloadB64": "not base64!"}, "payloadB64 is not valid base64"),
    ({"queue": "jobs", "payloadB64": B64, "traceId": ""}, "traceId must be a non-empty string"),
    ({"queue": "j" * (MAX_NAME_BYTES + 1), "payloadB64": B64}, f"queue is over {MAX_NAME_BYTES} bytes"),
    ({"queue": "jobs", "payloadB64": B64, "offset": 1}, "offset is set by the server"),
])
def test_the_body_of_a_call_that_is_not_plain_gets_the_checked_refusal(raw, words):
    body = orjson.dumps({"items": [PLAIN_ITEMS[0], raw]})
    with pytest.raises(ApiError) as refused:
        messages.push_rows_of(body)
    assert refused.value.status == 400 and "items[1]" in str(refused.value) and words in str(refused.value)


def test_a_payload_integer_past_64_bits_is_read_exactly():
    body = b'{"items": [{"queue": "jobs", "payload": 123456789012345678901234567890}]}'
    [row] = messages.push_rows_of(body)
    assert row[push_parsing.ROW_PAYLOAD] == b"123456789012345678901234567890"


@pytest.mark.parametrize("body, words", [
    (b"{", "the body is not valid JSON"),
    (b'{"items": [], "x": 1}', "unknown top-level field(s): x"),
    (b'{"items": []}', "items is empty"),
    (b'{"items": 123456789012345678901234567890}', 'the body must be {"items": [...]}'),
])
def test_a_body_that_is_not_a_push_is_refused_as_before(body, words):
    with pytest.raises(ApiError) as refused:
        messages.push_rows_of(body)
    assert refused.value.status == 400 and words in str(refused.value)


async def test_a_plain_call_and_the_same_items_sent_the_checked_way_answer_alike():
    plain = [{"queue": "q", "payloadB64": B64, "transactionId": f"t-{i % 3}"} for i in range(6)]
    as_json = [{"queue": "q", "payload": "x", "transactionId": f"t-{i % 3}"} for i in range(6)]
    answers = []
    for items in (plain, as_json):
        async with ApiHarness() as api:
            status, _, body = await api.call("POST", "/api/v1/push", token="acme-rw", json={"items": items})
            assert status == 201, body
            [command] = [c for c in api.groups["acme"].proposed if c["op"] == "push"]
            assert len(command["rows"]) == 6
            answers.append([{k: v for k, v in r.items() if k != "messageId"} for r in body["results"]])
    assert answers[0] == answers[1]
    assert [r["status"] for r in answers[0]] == ["queued"] * 3 + ["duplicate"] * 3
