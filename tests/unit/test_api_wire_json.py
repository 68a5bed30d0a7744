"""wire_json reads and writes what the stdlib did: the same values in, the same meaning out."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.api import wire_json

# Integers around every boundary that matters: 2^53 (JSON-safe), 2^63 and 2^64 (orjson's range).
BOUNDARY_INTS = st.sampled_from([2**53 - 1, 2**53, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, 10**30])
INTS = st.one_of(st.integers(), BOUNDARY_INTS, BOUNDARY_INTS.map(lambda n: -n))
# Text with lone surrogates and non-ASCII, which orjson and the stdlib treat differently.
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), INTS, st.floats(allow_nan=True, allow_infinity=True), TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(TEXT, inner, max_size=4)), max_leaves=20)


def meaning(value) -> str:
    """A value's identity as text: NaN equals NaN here, 1 differs from 1.0, -0.0 from 0.0."""
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def reading(read, raw: bytes):
    """(kind, meaning): the value read, or the kind of error raised."""
    try:
        return "value", meaning(read(raw))
    except RecursionError:
        return "error", "RecursionError"
    except ValueError:
        return "error", "ValueError"


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_dumps_means_what_the_stdlib_wrote(value):
    assert meaning(json.loads(wire_json.dumps(value))) == meaning(json.loads(wire_json.stdlib_dumps(value)))


@settings(max_examples=400, deadline=None)
@given(VALUES, st.sampled_from([{}, {"ensure_ascii": False}, {"indent": 1}, {"separators": (",", ":")}]))
def test_loads_reads_what_the_stdlib_read(value, layout):
    raw = json.dumps(value, allow_nan=True, **layout).encode("utf-8", "surrogatepass")
    assert reading(wire_json.loads, raw) == reading(wire_json.stdlib_loads, raw)


# Bytes near JSON's grammar, so that both readers see many almost-valid documents.
JSONISH = st.lists(st.sampled_from([
    b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\\u", b"d800", b"dc00", b"00e9", b"0", b"1", b"9", b"-",
    b"+", b".", b"e", b"E", b"true", b"false", b"null", b"NaN", b"Infinity", b" ", b"\t", b"\n", b"\r",
    b"\x0c", b"\x00", b"\x7f", b"\xc3\xa9", b"\xed\xa0\x80", b"\xff", b"\xef\xbb\xbf", b"a", b"/", b"1" * 19,
]), max_size=24).map(b"".join)


@settings(max_examples=1500, deadline=None)
@given(JSONISH)
def test_loads_accepts_and_refuses_what_the_stdlib_did(raw):
    assert reading(wire_json.loads, raw) == reading(wire_json.stdlib_loads, raw)


@pytest.mark.parametrize("raw, expected", [
    (b"18446744073709551616", 2**64),  # orjson alone would read 1.8446744073709552e+19
    (b"-9223372036854775809", -(2**63) - 1),
    (b'{"delayMs": 1000000000000000000000}', {"delayMs": 10**21}),
    (b"\xef\xbb\xbf[1]", [1]),  # a BOM: orjson refuses it
    ('{"a": "\u00e9"}'.encode("utf-16"), {"a": "\u00e9"}),
])
def test_loads_reads_what_orjson_alone_would_not(raw, expected):
    value = wire_json.loads(raw)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("raw", [b"[1e400]", b"-1e400", b'{"payload": 1.5e999}'])
def test_loads_refuses_a_number_that_overflows_to_infinity(raw):
    # Read as inf it would be stored and answered as `Infinity`, which is not JSON.
    with pytest.raises(ValueError):
        wire_json.loads(raw)


def test_a_stored_payload_holding_a_huge_exponent_is_answered_as_bytes():
    from queen_raft.api.codec import payload_fields
    assert payload_fields(b"1e400") == {"payloadB64": "MWU0MDA="}
    assert payload_fields(b"[1.5]") == {"payload": [1.5]}


@pytest.mark.parametrize("raw", [b"NaN", b"[Infinity]", b"[1,]", b"", b"[" * 5000,
                                 b'"\\ud800"', b'{"k": ["\\udc00"]}', b'{"\\ud800": 1}', b'"\xed\xa0\x80"'])
def test_loads_refuses_what_the_stdlib_refused(raw):
    """A lone surrogate too, escaped or raw: not Unicode text, no entry or answer could carry it."""
    with pytest.raises((ValueError, RecursionError)):
        wire_json.loads(raw)


@pytest.mark.parametrize("value, text", [
    ({"n": 2**64}, b'{"n":18446744073709551616}'),  # orjson refuses ints past 64 bits
    ([math.nan, math.inf], b"[NaN,Infinity]"),  # orjson would write [null,null]
    ({"k": "\ud800"}, b'{"k":"\\ud800"}'),  # orjson refuses lone surrogates
    ({1: "a"}, b'{"1":"a"}'),  # orjson refuses non-string keys
    ({"k": None}, b'{"k":null}'),
])
def test_dumps_writes_what_orjson_alone_would_not(value, text):
    assert wire_json.dumps(value) == text


def test_dumps_of_a_plain_answer_is_orjsons():
    answer = {"results": [{"ok": True, "status": "scheduled", "timerKey": "caf\u00e9", "deliverAt": 2**53}]}
    assert wire_json.dumps(answer) == '{"results":[{"ok":true,"status":"scheduled","timerKey":"caf\u00e9","deliverAt":9007199254740992}]}'.encode()
