"""How the group says it cannot answer now: GroupUnavailable with a reason and a Retry-After, and
EntryTooLarge for a command that no retry can help.

The reasons are the API's 503 `reason` field (api/errors.py lists them), so the table from
pysyncobj's FAIL_REASON to a reason lives here, in one place.
"""

from __future__ import annotations

from pysyncobj import FAIL_REASON

# Retry-After per reason. An election takes ~0.3 s median and up to ~2 s after a kill -9
# (research section 5), so "no leader" and timeouts ask for a second; a leader change usually has
# a new leader already; a full pipeline drains in well under half a second.
RETRY_AFTER_NO_LEADER_S = 1.0
RETRY_AFTER_TIMEOUT_S = 1.0
RETRY_AFTER_LEADER_CHANGED_S = 0.5
RETRY_AFTER_BUSY_S = 0.5

_REASON_BY_FAIL = {
    FAIL_REASON.QUEUE_FULL: "queue_full",
    FAIL_REASON.MISSING_LEADER: "no_leader",
    FAIL_REASON.DISCARDED: "leader_changed",
    FAIL_REASON.NOT_LEADER: "leader_changed",
    FAIL_REASON.LEADER_CHANGED: "leader_changed",
    FAIL_REASON.UNKNOWN_OUTCOME: "leader_changed",
    FAIL_REASON.REQUEST_DENIED: "busy",
}
_RETRY_AFTER_BY_REASON = {
    "no_leader": RETRY_AFTER_NO_LEADER_S,
    "timeout": RETRY_AFTER_TIMEOUT_S,
    "leader_changed": RETRY_AFTER_LEADER_CHANGED_S,
    "queue_full": RETRY_AFTER_BUSY_S,
    "busy": RETRY_AFTER_BUSY_S,
    "disk_full": RETRY_AFTER_NO_LEADER_S,  # another node of the cluster can take the write meanwhile
}


class EntryTooLarge(ValueError):
    """The encoded command exceeds MAX_ENTRY_BYTES: refuse the request (413), never retry it."""


class GroupUnavailable(Exception):
    """The group could not answer now. The outcome of a write may be unknown: it may still commit.

    Every write is idempotent (timers by key, pushes by txn), so the client retries after
    retry_after_s.
    """

    def __init__(self, reason: str, retry_after_s: float | None = None, detail: str = "") -> None:
        self.reason = reason
        self.retry_after_s = _RETRY_AFTER_BY_REASON.get(reason, RETRY_AFTER_TIMEOUT_S) if retry_after_s is None else retry_after_s
        super().__init__(f"{reason}{': ' + detail if detail else ''} (retry after {self.retry_after_s} s)")


def unavailable_after_failure(error: int) -> GroupUnavailable:
    """The GroupUnavailable of a proposal pysyncobj answered with FAIL_REASON `error`."""
    reason = _REASON_BY_FAIL.get(error, "leader_changed")
    return GroupUnavailable(reason, detail=f"pysyncobj FAIL_REASON {error}")
