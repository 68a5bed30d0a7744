"""A pop's answer body, with each JSON payload written as its own stored bytes.

A payload is answered as `payload` (its JSON value) when its bytes are JSON, else as `payloadB64`
(docs/spec.md section 3; api/codec.py decides which). Decoding each payload into Python objects
and encoding them again is most of what a pop of small messages costs the leader's loop thread
beyond the state, and it gives back text of the same value. So here the decision is the same
(orjson must read the bytes, they must nest at most MAX_JSON_DEPTH levels, and what orjson refuses
goes through `payload_fields` as before), and the answer then carries the bytes themselves
(`orjson.Fragment`): the same value once read back, integers past 64 bits included (their digits
are written as stored), in the payload's own spacing and key order.

Anything else goes the general way (`None` here): an encrypted message (decrypted per message by
api/messages.py), or an answer orjson cannot write (a lone surrogate in a transactionId; the
standard library writes those, and it cannot write a Fragment).
"""

from __future__ import annotations

from typing import Any

import orjson

from queen_raft.api.codec import encode_base64, nests_too_deep, payload_fields
from queen_raft.api.wire_json import ORJSON_OPTIONS


def _answered_message(message: dict) -> dict | None:
    """The message as the client sees it, or None when it is encrypted."""
    if message.get("encrypted"):
        return None
    out = dict(message)  # the fields in their order, less the two replaced below
    payload = bytes(out.pop("payload", b""))
    out.pop("encrypted", None)
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        out.update(payload_fields(payload))  # the standard library's reading decides
        return out
    if nests_too_deep(payload, value):
        out["payloadB64"] = encode_base64(payload)
    else:
        out["payload"] = orjson.Fragment(payload)
    return out


def pop_answer_body(result: dict[str, Any], extra: dict[str, Any] | None = None) -> bytes | None:
    """`{leaseId, messages}` (and the fields of `extra`) as JSON bytes, or None when the general
    writer must answer."""
    messages = []
    for message in result["messages"]:
        answered = _answered_message(message)
        if answered is None:
            return None
        messages.append(answered)
    try:
        return orjson.dumps({"leaseId": result.get("leaseId"), "messages": messages, **(extra or {})},
                            option=ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return None
