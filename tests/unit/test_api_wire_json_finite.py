"""The hot answers' JSON (pop, ack, push): orjson's text kept where it holds `null`, for values
whose floats are finite; and a stored payload read by orjson where it gives the old reader's value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.api import codec, wire_json

BOUNDARY_INTS = st.sampled_from([2**53, 2**63 - 1, 2**63, 2**64, 10**30])
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
FINITE = st.one_of(st.none(), st.booleans(), st.integers(), BOUNDARY_INTS, st.floats(allow_nan=False, allow_infinity=False), TEXT)
FINITE_VALUES = st.recursive(FINITE, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)


def meaning(value) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


@settings(max_examples=400, deadline=None)
@given(FINITE_VALUES)
def test_dumps_finite_means_what_the_stdlib_wrote(value):
    assert meaning(json.loads(wire_json.dumps_finite(value))) == meaning(json.loads(wire_json.stdlib_dumps(value)))


def test_a_pop_answer_holding_null_is_written_by_orjson():
    answer = {"leaseId": "l1", "messages": [{"transactionId": "t", "traceId": None, "payload": {"n": 1.5}}]}
    text = wire_json.dumps_finite(answer)
    assert text == b'{"leaseId":"l1","messages":[{"transactionId":"t","traceId":null,"payload":{"n":1.5}}]}'
    assert json.loads(text) == json.loads(wire_json.dumps(answer))


@pytest.mark.parametrize("value, text", [
    ({"n": 2**64}, b'{"n":18446744073709551616}'),
    ({"k": "\ud800", "t": None}, b'{"k":"\\ud800","t":null}'),
    ({1: None}, b'{"1":null}'),
])
def test_dumps_finite_leaves_to_the_stdlib_what_orjson_refuses(value, text):
    assert wire_json.dumps_finite(value) == text


def old_payload_fields(data: bytes) -> dict:
    """payload_fields as it read every payload with the stdlib decoder alone."""
    try:
        value = codec._PAYLOAD_DECODER.decode(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {"payloadB64": codec.encode_base64(data)}
    if codec._nests_too_deep(data, value):
        return {"payloadB64": codec.encode_base64(data)}
    return {"payload": value}


PAYLOADISH = st.lists(st.sampled_from([
    b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u", b"d800", b"dc00", b"00e9", b"0", b"1", b"9", b"-",
    b"+", b".", b"e", b"E", b"400", b"true", b"false", b"null", b"NaN", b"Infinity", b" ", b"\n", b"\x00",
    b"\xc3\xa9", b"\xed\xa0\x80", b"\xff", b"\xef\xbb\xbf", b"a", b"1" * 19,
]), max_size=24).map(b"".join)


@settings(max_examples=1500, deadline=None)
@given(PAYLOADISH)
def test_payload_fields_answers_what_the_stdlib_reader_did(data):
    assert meaning(codec.payload_fields(data)) == meaning(old_payload_fields(data))


@pytest.mark.parametrize("data", [b"1e400", b"[1.5]", b"123456789012345678901234567890", b'"\\ud800"', b"\xef\xbb\xbf1",
                                  b'{"a":1,"a":2}', b"-0", b"1e-400", b"[" * 40 + b"]" * 40, b" 7 "])
def test_payload_fields_of_the_documents_the_readers_part_on(data):
    assert meaning(codec.payload_fields(data)) == meaning(old_payload_fields(data))
