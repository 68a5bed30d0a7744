"""Payload bytes on the JSON wire: base64 for timers and payloadB64, decoded JSON for message payloads."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from queen_raft.api.wire_json import finite_float


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
    """A pushed JSON value is stored as its compact UTF-8 JSON encoding."""
    return _PAYLOAD_ENCODER.encode(value).encode("utf-8")


def _refuse_non_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


# NaN and Infinity are Python's extensions, not JSON: bytes holding one (a timer's or a payloadB64
# push's payload may) are not a JSON payload, and decoding them as one put NaN, invalid JSON, in
# the answer. Built once, like the body decoder.
_PAYLOAD_DECODER = json.JSONDecoder(parse_constant=_refuse_non_json_constant, parse_float=finite_float)


def payload_fields(data: bytes) -> dict[str, Any]:
    """`{"payload": value}` when the bytes are UTF-8 JSON, else `{"payloadB64": text}` (docs/spec.md section 3)."""
    try:
        return {"payload": _PAYLOAD_DECODER.decode(data.decode("utf-8"))}
    except (UnicodeDecodeError, ValueError):
        return {"payloadB64": encode_base64(data)}
