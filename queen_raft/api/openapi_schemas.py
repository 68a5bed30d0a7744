"""The schemas of the OpenAPI document (components/schemas) and the small builders they use.

Bounds come from the state and the route modules, so a limit changed there changes the document.
"""

from __future__ import annotations

from typing import Any

from queen_raft.api import kv, messages
from queen_raft.api.transaction import MAX_TRANSACTION_ITEMS
from queen_raft.api.errors import UNAVAILABLE_REASONS
from queen_raft.api.requests import JSON_SAFE_INT
from queen_raft.state.limits import MAX_JSON_DEPTH, MAX_KV_VALUE_BYTES, MAX_NAME_BYTES

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"
REF = "#/components/schemas/"

STR = {"type": "string"}
NON_EMPTY = {"type": "string", "minLength": 1}
INT = {"type": "integer", "minimum": -JSON_SAFE_INT, "maximum": JSON_SAFE_INT}
NON_NEG = {"type": "integer", "minimum": 0, "maximum": JSON_SAFE_INT}
BOOL = {"type": "boolean"}
NULL_STR = {"type": ["string", "null"]}
NULL_INT = {"type": ["integer", "null"]}
B64 = {"type": "string", "contentEncoding": "base64"}
# A timer's and a message's identities (queue, partition, txn, transactionId, consumer group) and
# KV's ns and key: at most MAX_NAME_BYTES of UTF-8 (maxLength counts
# characters, so it is the bound for ASCII names; the description states the byte bound).
NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_BYTES,
        "description": f"a name: at most {MAX_NAME_BYTES} bytes of UTF-8 (beyond: 400)"}
# The same bound in a path or query, stated in words only: maxLength counts characters, and 1,024
# four-byte characters percent-encoded make a 12 KB URL, past the HTTP server's request-line limit
# (8190 bytes), which refuses it before any route with a plain-text 400.
NAME_IN_URL = {"type": "string", "minLength": 1, "description": NAME["description"]}
ANY: dict = {}


def ref(name: str) -> dict:
    return {"$ref": REF + name}


def obj(properties: dict, required: tuple[str, ...] = (), closed: bool = True) -> dict:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


def array(items: dict, min_items: int = 0, max_items: int | None = None) -> dict:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if min_items:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    return schema


TIMER_FIELDS = {
    "partition": STR, "deliverAt": INT, "dueAt": INT, "txn": STR, "messageId": STR, "payloadZstd": BOOL,
    "encrypted": BOOL, "producerSub": NULL_STR, "attempts": NON_NEG, "lastError": NULL_STR,
    "claimed": {"const": False}, "createdAt": INT, "updatedAt": INT,
}
# Where a fired timer's message went, while the state remembers the fire (the destination queue's
# dedupWindowSeconds): a cancel's and a peek's answer for a key with no pending timer.
FIRED_FIELDS = {
    "partition": STR,
    "offset": {**NON_NEG, "description": "status fired: the message's offset in the partition"},
    "dlqId": {**STR, "description": "status dead_lettered: the DLQ row the timer was filed as"},
    "firedAt": {**INT, "description": "ms on the group clock: the fire (dead_lettered: the last failed one)"},
}
KV_VALUE = {"description": f"any JSON value nested at most {MAX_JSON_DEPTH} levels and at most "
                          f"{MAX_KV_VALUE_BYTES} bytes stored (msgpack); beyond either, 400 bad_request"}
KV_ROW = obj({"ns": STR, "key": STR, "found": BOOL, "value": ANY, "version": NULL_INT, "expiresAt": NULL_INT},
             ("ns", "key", "found", "value", "version", "expiresAt"))
PUSH_VERDICT = obj({
    "index": NON_NEG, "messageId": STR, "transactionId": STR, "queue": STR, "partition": STR,
    "status": {"enum": ["queued", "duplicate", "error"]}, "offset": NULL_INT, "error": STR,
}, ("index", "messageId", "transactionId", "queue", "partition", "status", "offset"))
ACK_VERDICT = obj({"index": NON_NEG, "success": BOOL, "error": STR, "message": STR, "dlq": BOOL}, ("index", "success"))
MESSAGE_PAYLOAD = {
    "payload": {"description": f"the payload's bytes as a JSON value, when they are UTF-8 JSON nested at most "
                               f"{MAX_JSON_DEPTH} levels"},
    "payloadB64": {**B64, "description": "the payload's bytes otherwise (not JSON, or JSON nested deeper)"},
    "encrypted": BOOL, "decryptError": STR}

SCHEMAS: dict[str, dict] = {
    "Error": obj({
        "error": {"type": "string", "description": "the error code"}, "message": STR,
        "index": {**NON_NEG, "description": "the item to blame, when there is one"},
        "success": {"const": False, "description": "transaction refusals only"},
        "reason": {"type": "string", "description": "transaction refusals only: the error code again"},
    }, ("error", "message")),
    # Every 503: the error shape plus a machine-readable reason (queen_raft/api/errors.py).
    "Unavailable": obj({
        "error": {"type": "string", "description": "the error code"}, "message": STR,
        "reason": {"enum": list(UNAVAILABLE_REASONS), "description": (
            "why the node cannot answer now. Refused before anything was proposed (certainly not applied): "
            "no_leader, busy, queue_full, paused (an operator paused scheduling: timers_disabled), "
            "no_encryption_key (this node lacks QUEEN_ENCRYPTION_KEY), disk_full (this node's journal cannot "
            "write; another node can take the write). The entry may still commit: timeout, "
            "leader_changed")},
        "success": {"const": False, "description": "transaction refusals only"},
    }, ("error", "message", "reason")),
    "TimerSchedule": obj({
        "op": {"enum": ["schedule", "reschedule"]}, "queue": NAME, "timerKey": NAME,
        "delayMs": {**INT, "minimum": 0, "description": "ms from the group's now; 0 is due at once"},
        "txn": NAME, "payload": B64, "partition": NAME, "payloadZstd": BOOL, "encrypted": BOOL,
    }, ("op", "queue", "timerKey", "delayMs", "txn", "payload")),
    "TimerCancel": obj({"op": {"const": "cancel"}, "queue": NAME, "timerKey": NAME,
                        "txn": {**NAME, "type": ["string", "null"], "minLength": 0},
                        "requirePending": {**BOOL, "description": (
                            "inside POST /api/v1/transaction only (400 on POST /api/v1/timers): the transaction "
                            "rolls back with reason timer_not_pending unless this timer is pending")}},
                       ("op", "queue", "timerKey")),
    "TimerOp": {"oneOf": [ref("TimerSchedule"), ref("TimerCancel")]},
    "TimerResult": obj({
        "ok": BOOL, "status": {"enum": ["scheduled", "rescheduled", "cancelled", "fired", "dead_lettered", "absent",
                                        "too_late"], "description": (
            "a cancel with no pending timer: fired (it fired within the destination queue's dedupWindowSeconds; "
            "txn, partition, offset, messageId and firedAt name the message it put there), dead_lettered (its last "
            "failed fire filed it in the DLQ as dlqId), absent (never seen, or forgotten since)")},
        "queue": STR, "timerKey": STR,
        "txn": {**NULL_STR, "description": "fired and dead_lettered: the txn that fired, not the one sent"},
        "messageId": STR, "deliverAt": INT, **FIRED_FIELDS,
        "requestTxn": {**NULL_STR, "description": "a cancel's answers: the txn the request sent (null: none)"},
    }, ("ok", "status", "queue", "timerKey", "txn")),
    "TimerPeek": {"oneOf": [
        obj({"found": {"const": True}, "status": {"const": "pending"}, "queue": STR, "timerKey": STR, "payload": B64,
             **TIMER_FIELDS},
            ("found", "status", "queue", "timerKey", "partition", "deliverAt", "txn", "messageId", "payload",
             "payloadZstd", "encrypted", "producerSub", "attempts", "lastError", "claimed", "createdAt", "updatedAt")),
        obj({"found": {"const": False}, "status": {"const": "fired"}, "queue": STR, "timerKey": STR, "txn": STR,
             "messageId": STR, **FIRED_FIELDS},
            ("found", "status", "queue", "timerKey", "txn", "partition", "offset", "messageId", "firedAt")),
        obj({"found": {"const": False}, "status": {"const": "dead_lettered"}, "queue": STR, "timerKey": STR,
             "txn": STR, "messageId": STR, **FIRED_FIELDS},
            ("found", "status", "queue", "timerKey", "txn", "partition", "dlqId", "messageId", "firedAt")),
        obj({"found": {"const": False}, "status": {"const": "absent"}, "queue": STR, "timerKey": STR},
            ("found", "status", "queue", "timerKey")),
    ]},
    "TimerList": obj({
        "rows": array(obj({"queue": STR, "timerKey": STR, **TIMER_FIELDS}, ("queue", "timerKey", "deliverAt", "txn"))),
        "truncated": BOOL, "nextAfter": NULL_STR,
    }, ("rows", "truncated", "nextAfter")),
    "PushItem": obj({
        "queue": NAME, "partition": NAME,
        "payload": {"description": f"any JSON value nested at most {MAX_JSON_DEPTH} levels (deeper: 400)"},
        "payloadB64": B64,
        "transactionId": NAME, "traceId": NON_EMPTY,
    }, ("queue",)),
    "PushVerdict": PUSH_VERDICT,
    "Message": obj({
        "transactionId": STR, "messageId": STR, "queue": STR, "partition": STR, "offset": NON_NEG, "leaseId": NULL_STR,
        "deliveryAttempt": NON_NEG, "createdAt": INT, "consumerGroup": STR, "traceId": NULL_STR, **MESSAGE_PAYLOAD,
    }, ("transactionId", "messageId", "partition", "offset", "deliveryAttempt", "createdAt", "consumerGroup")),
    "Record": obj({
        "offset": NON_NEG, "transactionId": STR, "messageId": STR, "createdAt": INT, "producerSub": NULL_STR,
        "traceId": NULL_STR, **MESSAGE_PAYLOAD,
    }, ("offset", "transactionId", "messageId", "createdAt")),
    "Acknowledgment": obj({
        "queue": NAME, "partition": NAME, "transactionId": NAME, "offset": NON_NEG,
        "status": {"enum": list(messages.ACK_STATUSES)}, "error": STR,
    }),
    "AckVerdict": ACK_VERDICT,
    "KvOp": obj({
        "op": {"enum": list(kv.KV_OPS)}, "ns": NAME, "key": NAME, "value": KV_VALUE,
        "ttlSeconds": {"type": "integer", "minimum": 1, "maximum": kv.MAX_KV_TTL_S}, "forever": BOOL,
        "by": INT, "expectedVersion": NULL_INT,
    }, ("op", "ns", "key")),
    "KvRow": KV_ROW,
    "QueueOptions": obj({
        "leaseTime": {"type": "integer", "description": "seconds"}, "retryLimit": {"type": "integer"},
        "deadLetterQueue": BOOL, "dedupWindowSeconds": {"type": "integer"},
        "delayedProcessing": {"type": "integer", "description": "seconds"}, "maxPayloadBytes": {"type": "integer"},
        "maxSize": {"type": "integer", "description": "messages; 0 is unlimited"},
        "retentionSeconds": {"type": "integer"}, "encryptionEnabled": BOOL,
    }),
    "DlqRow": obj({
        "dlqId": STR, "queue": STR, "partition": STR, "consumerGroup": STR, "offset": INT, "transactionId": STR,
        "messageId": STR, "payload": {"type": ["string", "null"], "contentEncoding": "base64"},
        "payloadZstd": BOOL, "encrypted": BOOL, "createdAt": NULL_INT, "producerSub": NULL_STR,
        "traceId": NULL_STR, "error": NULL_STR, "attempts": NULL_INT, "failedAt": NULL_INT, "timerKey": NULL_STR,
    }, ("dlqId", "queue", "partition", "consumerGroup", "offset", "transactionId", "messageId")),
    "TransactionOperation": {"oneOf": [
        {"allOf": [ref("PushItem")], "properties": {"type": {"const": "push"}}, "required": ["type"]},
        obj({
            "type": {"const": "ack"}, "consumerGroup": NAME, "leaseId": NON_EMPTY, "queue": NAME,
            "partition": NAME, "transactionId": NAME, "offset": NON_NEG,
            "status": {"enum": list(messages.ACK_STATUSES)}, "error": STR,
        }, ("type", "leaseId")),
    ]},
}
# A push item of a transaction carries `type` besides the push fields; the closed PushItem would
# refuse it, so the transaction's variant lists the fields itself.
SCHEMAS["TransactionOperation"]["oneOf"][0] = obj(
    {"type": {"const": "push"}, **SCHEMAS["PushItem"]["properties"]}, ("type", "queue"))
# The push of several messages Queen 2.x clients send: each item takes its own place in the results.
SCHEMAS["TransactionOperation"]["oneOf"].append(obj(
    {"type": {"const": "push"}, "items": array(ref("PushItem"), 1, MAX_TRANSACTION_ITEMS)}, ("type", "items")))
