"""Typed errors: every refusal of the wire (`{"error": code, "message": text}`) as one class per family.

Catch `QueenError` for everything, or a family: `AuthError` (401/403 by token), `BadRequest` (400:
fix the call), `LimitExceeded` (quota, horizon, size, rate: 403/413/429), `Unavailable` (503: the
SDK already retried it), `NotFound`, `Conflict`, `Refused` (a 200 whose verdict is a refusal:
a transaction, an ack, a push item), `ConnectionFailed` (no node answered).
"""

from __future__ import annotations

from typing import Any, Mapping


class QueenError(Exception):
    """status: the HTTP status (0 when no node answered); code: the wire's error code."""

    def __init__(self, status: int, code: str, message: str, *, retry_after_s: float | None = None,
                 hint: str | None = None, body: Any = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        # x-queen-timers-hint: the route that still works (DELETE) when a batch with a cancel is refused.
        self.hint = hint
        self.body = body
        # The op a batch refusal blames, in the call's index space (kv batches, transactions).
        self.index = body.get("index") if isinstance(body, dict) else None
        # An earlier attempt of this call failed after it was sent, so it may have been applied.
        self.maybe_applied_before = False

    def wire_body(self) -> dict:
        """The refusal as the server sent it (or as the SDK would have, for local failures)."""
        if isinstance(self.body, dict):
            return self.body
        return {"error": self.code, "message": self.message}


class AuthError(QueenError):
    pass


class Unauthorized(AuthError):
    """401: the token is missing or unknown."""


class Forbidden(AuthError):
    """403 forbidden: the token's level does not allow the route (a write-only token cancelling)."""


class BadRequest(QueenError):
    """400: the call itself is wrong; retrying it cannot help."""


class LimitExceeded(QueenError):
    pass


class QuotaExceeded(LimitExceeded):
    """403 timers_quota_exceeded: the tenant's pending-timer quota."""


class HorizonExceeded(LimitExceeded):
    """403 timer_horizon_exceeded: delayMs beyond QUEEN_TIMERS_MAX_HORIZON_S."""


class PayloadTooLarge(LimitExceeded):
    """413 payload_too_large."""


class AnswerTooLarge(PayloadTooLarge):
    """413 answer_too_large: the answer would carry over the node's MAX_ANSWER_BYTES of payloads or
    values (a KV batch, a transaction's kv, a fetch); read fewer items per call."""


class RateLimited(LimitExceeded):
    """429 rate_limited; `retry_after_s` says when."""


class Unavailable(QueenError):
    """503 after the SDK's retries ran out: no leader, a commit timeout, or an operator's pause."""


class TimersDisabled(Unavailable):
    """503 timers_disabled: an operator paused scheduling for the tenant. DELETE still works."""


class NotFound(QueenError):
    """404: an unknown route, lease (invalid_lease on extend) or DLQ row."""


class Conflict(QueenError):
    """409, e.g. dlq_replay_refused for a timer's dead-letter row."""


class PreconditionFailed(Conflict):
    """409 kv_precondition: a `check` or `putIfAbsent` failed; `index` names the op. Nothing changed."""


class ServerError(QueenError):
    """500 and any other status this SDK has no family for."""


class Refused(QueenError):
    """A 200/201 whose verdict refuses: the call ran, the operation did not."""


class TransactionRefused(Refused):
    """`{"success": false, reason, error, index?}`: the transaction was rolled back whole."""

    def __init__(self, status: int, reason: str, message: str, index: int | None = None, body: Any = None):
        super().__init__(status, reason, message, body=body)
        self.reason = reason
        if index is not None:
            self.index = index


class AckRefused(Refused):
    """An acknowledgment answered `success: false` (invalid_lease: expired, or not this lease's)."""


class PushRefused(Refused):
    """A push item answered `status: "error"` (payload_too_large over the queue's limit, queue_full)."""


class OutcomeUnknown(QueenError):
    """An attempt that may have been applied failed (503 or a dropped connection), and the retry was
    refused or answered in a way that the first attempt's success would explain (an ack already
    settled, a transaction whose ack is gone, a cancel that found no pending timer, a KV delete that
    found no live key). Look at the state to know."""


class ConnectionFailed(QueenError):
    """No node answered within the retry budget (status 0)."""


_BY_CODE: dict[str, type[QueenError]] = {
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "timers_quota_exceeded": QuotaExceeded,
    "timer_horizon_exceeded": HorizonExceeded,
    "payload_too_large": PayloadTooLarge,
    "answer_too_large": AnswerTooLarge,
    "rate_limited": RateLimited,
    "timers_disabled": TimersDisabled,
    "dlq_replay_refused": Conflict,
    "kv_precondition": PreconditionFailed,
}
_BY_STATUS: dict[int, type[QueenError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
    429: RateLimited, 503: Unavailable,
}


def error_from_response(status: int, body: Any, headers: Mapping[str, str]) -> QueenError:
    """The typed error for a non-2xx answer; the code decides first, the status second."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code, message = body["error"], str(body.get("message") or body["error"])
    else:
        code, message = f"http_{status}", body if isinstance(body, str) and body else f"HTTP {status}"
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or ServerError
    return cls(status, code, message, retry_after_s=retry_after_seconds(headers),
               hint=headers.get("x-queen-timers-hint"), body=body)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Retry-After in seconds (the server sends whole seconds); None when absent or an HTTP date."""
    text = headers.get("Retry-After")
    if text is None:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        return None
