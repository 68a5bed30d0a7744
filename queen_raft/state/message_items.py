"""The shape of one push item and one acknowledgment, as the state receives them.

The API checks the same shapes first (with its own wording); the state checks again because a
command in the log is the only input the state trusts, whoever proposed it.
"""

from __future__ import annotations

from .limits import DEFAULT_PARTITION
from .refusal import is_int, require

# The statuses an acknowledgment may carry, in the order the API lists them.
ACK_STATUSES = ("completed", "failed", "retry", "dlq")


def validate_push_item(item: object, index: int) -> None:
    """Shape of one push item (the API checked it already; the state checks again)."""
    require(isinstance(item, dict), "bad_request", "item must be an object", index)
    require(isinstance(item.get("queue"), str) and item["queue"] != "", "bad_request",
            "queue must be a non-empty string", index)
    require(isinstance(item.get("partition", DEFAULT_PARTITION), str), "bad_request",
            "partition must be a string", index)
    require(isinstance(item.get("payload"), bytes), "bad_request", "payload must be bytes", index)
    require(isinstance(item.get("transactionId"), str), "bad_request",
            "transactionId must be a string", index)
    require(isinstance(item.get("messageId"), str), "bad_request", "messageId must be a string", index)
    require(item.get("traceId") is None or isinstance(item["traceId"], str), "bad_request",
            "traceId must be a string", index)
    require(isinstance(item.get("encrypted", False), bool), "bad_request",
            "encrypted must be a boolean", index)


def validate_ack_item(item: object, index: int) -> None:
    # The usual item, as the API sends it for a batch acked by transactionId, passes in one test;
    # its three fields are all there is, so none of the checks below could refuse it.
    if (type(item) is dict and len(item) == 3 and type(item.get("transactionId")) is str
            and type(item.get("partition")) is str and item.get("status") in ACK_STATUSES):
        return
    require(isinstance(item, dict), "bad_request", "acknowledgment must be an object", index)
    require(item.get("status") in ACK_STATUSES, "bad_request", "unknown ack status", index)
    require(isinstance(item.get("partition", DEFAULT_PARTITION), str), "bad_request",
            "partition must be a string", index)
    require(item.get("queue") is None or isinstance(item["queue"], str), "bad_request",
            "queue must be a string", index)
    has_offset = is_int(item.get("offset"))
    has_txn = isinstance(item.get("transactionId"), str)
    require(has_offset or has_txn, "bad_request", "transactionId or offset is required", index)
    require(item.get("error") is None or isinstance(item["error"], str), "bad_request",
            "error must be a string", index)
