"""A pop's answer written with each JSON payload as its stored bytes (queen_raft/api/pop_answer.py)
reads back as the answer of the general writer (each payload decoded and encoded again) does: the
same payload or payloadB64 for every kind of stored bytes, integers past 64 bits and deep nesting
included; an encrypted message or an answer orjson cannot write goes to the general writer."""

from __future__ import annotations

import json

import pytest

from queen_raft.api.messages import wire_message
from queen_raft.api.pop_answer import pop_answer_body
from queen_raft.api.wire_json import dumps_finite
from queen_raft.state.limits import MAX_JSON_DEPTH

PAYLOADS = [
    b'{"reminder":"bench","user":12345}',
    b' { "spaced" : [1, 2.50, "x"] }\n',
    b'"a string"',
    b"42",
    b"null",
    b'{"wide":123456789012345678901234567890,"neg":-98765432109876543210}',
    b'{"k":1,"k":2}',
    "{\"caf\u00e9\":\"\u65e5\u672c\"}".encode(),
    b'{"esc":"\\u00e9\\n\\ud83d\\ude00"}',
    b"\xef\xbb\xbf{}",  # a BOM
    b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH,
    b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
    b"NaN",
    b"1e400",
    b"\xff\xfe binary",
    b"",
    b"{not json",
]


def message(payload: bytes, txn: str = "t1", encrypted: bool = False) -> dict:
    return {"transactionId": txn, "messageId": "m1", "queue": "q", "partition": "Default", "offset": 7,
            "leaseId": "L", "deliveryAttempt": 1, "payload": payload, "createdAt": 1_700_000_000_000,
            "consumerGroup": "__QUEUE_MODE__", "encrypted": encrypted, "traceId": None}


def general_body(result: dict) -> bytes:
    return dumps_finite({"leaseId": result.get("leaseId"),
                         "messages": [wire_message(m, None) for m in result["messages"]]})


@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_payload_reads_back_as_the_general_answer_gives_it(payload):
    result = {"leaseId": "L", "messages": [message(payload)]}
    body = pop_answer_body(result)
    assert body is not None
    assert json.loads(body) == json.loads(general_body(result))


def test_a_json_payload_is_answered_as_its_stored_bytes():
    payload = b'{"wide":123456789012345678901234567890}'
    body = pop_answer_body({"leaseId": "L", "messages": [message(payload)]})
    assert b'"payload":' + payload in body


def test_an_answer_of_many_messages_keeps_their_order_and_fields():
    result = {"leaseId": "L", "messages": [message(p, txn=f"t{i}") for i, p in enumerate(PAYLOADS)]}
    assert json.loads(pop_answer_body(result)) == json.loads(general_body(result))


def test_a_payload_holding_a_lone_surrogate_goes_to_the_general_writer():
    # The standard library reads it as JSON (orjson does not), and only the standard library can
    # write the string it holds back: the general writer answers, as it did.
    result = {"leaseId": "L", "messages": [message(b'{"lone":"\\ud800"}')]}
    assert pop_answer_body(result) is None
    assert json.loads(general_body(result))["messages"][0]["payload"] == {"lone": "\ud800"}


def test_an_encrypted_message_goes_to_the_general_writer():
    result = {"leaseId": "L", "messages": [message(b"{}"), message(b"sealed", encrypted=True)]}
    assert pop_answer_body(result) is None


def test_an_answer_orjson_cannot_write_goes_to_the_general_writer():
    result = {"leaseId": "L", "messages": [message(b"{}", txn="lone \ud800")]}
    assert pop_answer_body(result) is None
    assert json.loads(general_body(result))["messages"][0]["transactionId"] == "lone \ud800"
