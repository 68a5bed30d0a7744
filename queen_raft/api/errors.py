"""The one error shape of the wire, `{"error": code, "message": text}`, and how handlers raise it.

Every 503 also carries `reason`, one of UNAVAILABLE_REASONS, so a client (the fault harness first)
can tell a refusal made before anything was proposed (`no_leader`, `busy`, `queue_full`, `paused`,
`no_encryption_key`, `disk_full`: certainly not applied) from one whose entry may still commit (`timeout`,
`leader_changed`) without reading the message text.
"""

from __future__ import annotations

import json
import math

from aiohttp import web


# The Raft layer's GroupUnavailable reasons (queen_raft/raft/errors.py), then the API's own 503s:
# an operator's pause of scheduling (timers_disabled) and a node without QUEEN_ENCRYPTION_KEY.
RAFT_UNAVAILABLE_REASONS = ("no_leader", "timeout", "leader_changed", "queue_full", "busy", "disk_full")
PAUSED = "paused"
NO_ENCRYPTION_KEY = "no_encryption_key"
UNAVAILABLE_REASONS = RAFT_UNAVAILABLE_REASONS + (PAUSED, NO_ENCRYPTION_KEY)


class ApiError(Exception):
    """A refusal with its HTTP status and the error code of docs/spec.md; raised anywhere below a handler."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 fields: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        # Added to the body next to error and message: the blamed item's `index`, a transaction's
        # `success: false` and `reason`. None values are left out.
        self.fields = {k: v for k, v in (fields or {}).items() if v is not None}
        if status == 503 and self.fields.get("reason") not in UNAVAILABLE_REASONS:
            raise ValueError(f"a 503 ({code}) needs a reason, one of {', '.join(UNAVAILABLE_REASONS)}")

    def response(self) -> web.Response:
        return error_response(self.status, self.code, self.message, self.headers, self.fields)


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                   fields: dict | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps({**(fields or {}), "error": code, "message": message}).encode("utf-8"),
        content_type="application/json",
        headers=headers or {},
    )


def retry_after_header(seconds: float) -> dict[str, str]:
    """Retry-After carries whole seconds; round up so a client never comes back too early."""
    return {"Retry-After": str(max(1, math.ceil(seconds)))}


def unauthorized(message: str = "missing or unknown bearer token") -> ApiError:
    return ApiError(401, "unauthorized", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)
