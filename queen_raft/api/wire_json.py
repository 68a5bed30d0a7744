"""JSON on the wire, read and written with orjson where it gives the stdlib's exact answer.

orjson is ~10x faster than the stdlib on a 256-op schedule (its body and its answer were 23% of
the leader loop's time in the profile of a batched run), but it does not accept and produce the
same set of documents. Every body or answer orjson would treat differently takes the stdlib path,
so what a client sends and receives means what it did before:

- reading: orjson refuses what the stdlib reads (lone surrogates, a BOM, UTF-16/32 bodies, 1e400,
  nesting past 1024, NaN): its error sends the body to the stdlib, which answers or refuses it.
  Both refuse a string holding a lone surrogate (U+D800..U+DFFF unpaired, escaped or raw): it is
  not Unicode text, and no entry (msgpack needs UTF-8) or answer could carry it. The one document both read differently is an integer past 64 bits, which orjson
  silently turns into a float: a body holding a run of INT64_MAX_DIGITS digits goes to the stdlib
  unread by orjson.
- writing: orjson refuses integers past 64 bits, lone surrogates and non-string keys (the stdlib
  writes them); it writes NaN and Infinity as null where the stdlib writes NaN and Infinity. An
  answer orjson refuses, or whose orjson text holds `null` (a None, or a non-finite float), is
  written by the stdlib. orjson leaves non-ASCII characters as UTF-8 where the stdlib escapes them
  (\\u00e9): the same JSON string either way.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

# 2**63 has 19 digits: any integer orjson would read as a float (past 64 bits) has at least this
# many in a row. A long string of digits or a long fraction also matches and is read by the
# stdlib: the same value, a little slower. Found by mapping every digit to 0 and looking for a run
# of zeros: 30 us on a 256-op body, where the regex [0-9]{19} took 330 us.
INT64_MAX_DIGITS = 19
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGIT_RUN = b"0" * INT64_MAX_DIGITS
_NULL = b"null"
# Types orjson writes natively and the stdlib refuses (a 500 before): orjson refuses them too, so
# the stdlib raises its TypeError as it did.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
ORJSON_OPTIONS = _ORJSON_OPTIONS  # for writers of their own (api/pop_answer.py)


def _refuse_non_json_constant(name: str) -> Any:
    """NaN and Infinity are Python's extensions, not JSON: a stored payload must stay valid JSON."""
    raise ValueError(f"{name} is not a JSON value")


def finite_float(text: str) -> float:
    """A JSON number as a float, refusing one that overflows to infinity (1e400): Python would
    read it as inf and write it back as `Infinity`, which is not JSON, into a stored payload and
    every answer that carries it."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


# Built once: json.loads with parse_constant constructs a decoder and its scanner on every call.
# Decoding the bytes first, with json.detect_encoding, is what json.loads does with bytes.
_STDLIB_DECODER = json.JSONDecoder(parse_constant=_refuse_non_json_constant, parse_float=finite_float)
# Likewise for answers: json.dumps with separators builds an encoder per call.
_STDLIB_COMPACT_ENCODER = json.JSONEncoder(separators=(",", ":"))


class LoneSurrogateError(ValueError):
    """A string of the document holds an unpaired surrogate."""


def stdlib_loads(raw: bytes) -> Any:
    """The reference reading: json.loads of bytes, NaN, Infinity, numbers that overflow to
    infinity and lone surrogates refused. Raises ValueError
    (UnicodeDecodeError, JSONDecodeError, LoneSurrogateError) or RecursionError."""
    text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    value = _STDLIB_DECODER.decode(text)
    if _MAY_HOLD_SURROGATE.search(text) is not None and holds_lone_surrogate(value):
        raise LoneSurrogateError("a string holds a lone surrogate (an unpaired \\ud800..\\udfff): not Unicode text")
    return value


# What a lone surrogate in the decoded value comes from: an escape \udXXX (X from 8 up) or a raw
# surrogate the "surrogatepass" decoding let through. A paired escape matches too; the walk tells.
_MAY_HOLD_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")


def holds_lone_surrogate(value: Any) -> bool:
    """Whether any string of a decoded JSON value (a key or a value) is not encodable as UTF-8.
    Walked with a stack: the value may nest as deep as the decoder allowed."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif type(item) is list:
            stack.extend(item)
        elif type(item) is dict:
            stack.extend(item)
            stack.extend(item.values())
    return False


def may_hold_wide_integer(raw: bytes) -> bool:
    """Whether the JSON text may hold an integer orjson would read as a float (past 64 bits)."""
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_TO_ZERO)


def loads(raw: bytes) -> Any:
    """The value `stdlib_loads(raw)` gives, raising what it raises; orjson reads it when it can."""
    if not may_hold_wide_integer(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the stdlib reads it, or raises its own error for the message
    return stdlib_loads(raw)


# What loads_without_integer_scan answers for a document orjson does not read.
NOT_READ = object()


def loads_without_integer_scan(raw: bytes) -> Any:
    """orjson's reading of `raw`, without the scan for integers past 64 bits: `loads(raw)`, except
    that such an integer reads as a float; NOT_READ when orjson refuses the document (`loads`
    then answers or refuses it). For a caller that accepts no float where the document's numbers
    go (so a float it meets sends it to `loads`): it skips a pass over the bytes of every body."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return NOT_READ


def stdlib_dumps(value: Any) -> bytes:
    """The reference writing: compact separators, ASCII escapes, NaN written as NaN."""
    return _STDLIB_COMPACT_ENCODER.encode(value).encode("utf-8")


def dumps(value: Any) -> bytes:
    """JSON text equal in meaning to `stdlib_dumps(value)` (the same values once read back);
    orjson writes it when it can."""
    try:
        text = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return stdlib_dumps(value)
    if _NULL in text:  # a None, or a NaN/Infinity orjson wrote as null: let the stdlib say which
        return stdlib_dumps(value)
    return text


def dumps_finite(value: Any) -> bytes:
    """`dumps` for a value whose floats are all finite, which the caller vouches for: an answer
    built from the state's strings, integers, booleans and None and from payloads read by a reader
    that refuses NaN, Infinity and numbers past a double (api/codec.py). orjson writes such a
    value's None as `null`, as the stdlib does, so its text is kept even where it holds `null` (a
    pop's `traceId`); only what orjson refuses (integers past 64 bits, lone surrogates,
    non-string keys) goes to the stdlib."""
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return stdlib_dumps(value)
