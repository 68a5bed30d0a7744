"""Payload bytes on the JSON wire: base64 for timers and payloadB64, decoded JSON for message payloads."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import orjson

from queen_raft.api.wire_json import finite_float, may_hold_wide_integer
from queen_raft.state.limits import MAX_JSON_DEPTH
from queen_raft.state.values import nesting_depth


class PayloadDecodeError(ValueError):
    pass


def decode_base64(text: Any) -> bytes:
    """Strict base64 (standard alphabet, padding required): a typo must be a 400, not silent garbage.

    binascii's strict mode is what base64.b64decode(validate=True) calls, without its Python-level
    wrapping (a third of this function's cost on a 256-op schedule); a non-ASCII character is its
    ValueError, as it was the ASCII encode's."""
    if not isinstance(text, str):
        raise PayloadDecodeError("must be a base64 string")
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except ValueError:  # binascii.Error, or a character past ASCII
        raise PayloadDecodeError("is not valid base64") from None


def encode_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# Built once: json.dumps with options builds an encoder per call, once per pushed item. Same bytes.
_PAYLOAD_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def json_value_to_bytes(value: Any) -> bytes:
    """A pushed JSON value is stored as its compact UTF-8 JSON encoding. Raises PayloadDecodeError
    for one nested deeper than MAX_JSON_DEPTH: pop and fetch could not answer it as JSON."""
    try:
        data = _PAYLOAD_ENCODER.encode(value).encode("utf-8")
    except RecursionError:
        data = None
    if data is None or _nests_too_deep(data, value):
        raise PayloadDecodeError(f"nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def _nests_too_deep(data: bytes, value: Any) -> bool:
    """Whether `value`, decoded from the JSON text `data`, nests past MAX_JSON_DEPTH. Fewer
    brackets than the bound in the text (strings' included) settle it without a walk."""
    return data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and \
        nesting_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH


# For the pop answer's writer (api/pop_answer.py), which decides as payload_fields does.
nests_too_deep = _nests_too_deep


def _refuse_non_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


# NaN and Infinity are Python's extensions, not JSON: bytes holding one (a timer's or a payloadB64
# push's payload may) are not a JSON payload, and decoding them as one put NaN, invalid JSON, in
# the answer. Built once, like the body decoder.
_PAYLOAD_DECODER = json.JSONDecoder(parse_constant=_refuse_non_json_constant, parse_float=finite_float)


def payload_fields(data: bytes) -> dict[str, Any]:
    """`{"payload": value}` when the bytes are UTF-8 JSON nested at most MAX_JSON_DEPTH levels, else
    `{"payloadB64": text}` (docs/spec.md section 3). Deeper JSON is answered as bytes too: the decoder
    runs out of recursion on it, or no encoder could write it back inside the answer, and either
    would fail every pop of its partition."""
    try:
        value = _read_payload_json(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {"payloadB64": encode_base64(data)}
    if _nests_too_deep(data, value):
        return {"payloadB64": encode_base64(data)}
    return {"payload": value}


def _read_payload_json(data: bytes) -> Any:
    """`_PAYLOAD_DECODER`'s value of the UTF-8 text `data`, raising what it raises. orjson reads it
    when it can (several times faster on a pop of 100 messages): it refuses everything that
    decoder refuses (invalid UTF-8, NaN, Infinity, numbers past a double) and more (a BOM, lone
    surrogates), and those go to the decoder, which answers or refuses them as before. The one
    document both read differently, an integer past 64 bits (orjson makes it a float), never
    reaches orjson (wire_json.may_hold_wide_integer)."""
    if not may_hold_wide_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return _PAYLOAD_DECODER.decode(data.decode("utf-8"))
