"""Payload bytes on the wire: what the SDK sends for a JSON value or raw bytes, and what it reads back."""

from __future__ import annotations

import base64
import json
from typing import Any

import zstandard

# The server stores a pushed JSON value as its compact UTF-8 encoding; timers get the same bytes,
# so a timer's fired message and a pushed one look alike to a consumer.
_JSON_SEPARATORS = (",", ":")
# zstd level 3 is the library's default: most of the ratio at a fraction of the CPU of higher levels.
ZSTD_LEVEL = 3


def payload_bytes(value: Any) -> bytes:
    """bytes pass as they are; anything else is a JSON value, encoded compactly in UTF-8."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return json.dumps(value, separators=_JSON_SEPARATORS, ensure_ascii=False, allow_nan=False).encode("utf-8")


def timer_payload_fields(value: Any, zstd: bool) -> dict[str, Any]:
    """`payload` (base64) and, when compressed, `payloadZstd: true`, for a timer op."""
    data = payload_bytes(value)
    if zstd:
        data = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
        return {"payload": base64.b64encode(data).decode("ascii"), "payloadZstd": True}
    return {"payload": base64.b64encode(data).decode("ascii")}


def push_payload_fields(value: Any) -> dict[str, Any]:
    """A push item: a JSON value as `payload`, bytes as `payloadB64` (docs/spec.md section 3)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"payloadB64": base64.b64encode(bytes(value)).decode("ascii")}
    payload_bytes(value)  # refuses NaN and non-JSON values here, not as a 400 later
    return {"payload": value}


def message_payload(wire: dict) -> Any:
    """A popped or fetched message's payload: the JSON value, or bytes when it was not UTF-8 JSON."""
    if "payload" in wire:
        return wire["payload"]
    if "payloadB64" in wire:
        return base64.b64decode(wire["payloadB64"])
    return None


def stored_timer_payload(b64: str | None, zstd: bool, encrypted: bool) -> Any:
    """A peeked timer's payload as its consumer will see it: decompressed, then JSON when it is JSON.
    Encrypted payloads stay bytes (peek never decrypts)."""
    if b64 is None:
        return None
    data = base64.b64decode(b64)
    if encrypted:
        return data
    if zstd:
        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)  # frames without a content size too
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return data
