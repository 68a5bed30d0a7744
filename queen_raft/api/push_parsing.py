"""A push call's items read straight into the rows of its command (state/push_rows.py), when they
are all plain: the usual call, which the checked path of messages.parse_push_item would accept
field by field.

A plain item is a map of `queue` and `payloadB64` and any of `partition`, `transactionId`,
`traceId`, each a string the checked path takes as it is: a name short enough to be within
MAX_NAME_BYTES whatever its characters, a non-empty traceId, and strict base64. Such an item
becomes the row the checked path's map would have been, without the map: one list per item
instead of a map, the map's row and their lookups (the per-item work of a push on the proposer).
Any other item (a JSON `payload`, a field of another type, a long name, bad base64, a field the
checked path refuses) makes the whole call go the checked way, which gives the refusal with its
index and wording.
"""

from __future__ import annotations

import binascii
from typing import Any

from queen_raft.api.encryption import encryption_unavailable
from queen_raft.api.errors import ApiError
from queen_raft.api.serving import ServingNode
from queen_raft.api.timer_parsing import NAME_CHARS_ALWAYS_WITHIN
from queen_raft.raft.command_forms import PUSH_ROWS_LEVEL
from queen_raft.state.limits import DEFAULT_PARTITION
from queen_raft.state.push_rows import PUSH_ROW_FIELDS

# One call is one Raft entry: bound the items so an entry stays small enough to replicate fast.
MAX_PUSH_ITEMS = 1000

PLAIN_PUSH_FIELDS = frozenset({"queue", "partition", "payloadB64", "transactionId", "traceId"})
ROW_QUEUE, ROW_PAYLOAD, ROW_ENCRYPTED = map(PUSH_ROW_FIELDS.index, ("queue", "payload", "encrypted"))


def push_items_of(body: Any) -> list:
    """The body's items, or the 400 for a body that is not {"items": [1..MAX_PUSH_ITEMS]}."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise ApiError(400, "bad_request", 'the body must be {"items": [...]}')
    extra = sorted(body.keys() - {"items"})
    if extra:
        raise ApiError(400, "bad_request", f"unknown top-level field(s): {', '.join(extra)}")
    raw_items = body["items"]
    if not raw_items:
        raise ApiError(400, "bad_request", "items is empty")
    if len(raw_items) > MAX_PUSH_ITEMS:
        raise ApiError(400, "bad_request", f"{len(raw_items)} items is over the cap of {MAX_PUSH_ITEMS} per call")
    return raw_items


def plain_push_rows(raw_items: list, message_ids: list[str]) -> list[list] | None:
    """The rows of `raw_items` (a list within the per-call cap), each with its messageId, or None
    when an item is not plain."""
    rows = []
    append = rows.append
    within = NAME_CHARS_ALWAYS_WITHIN
    a2b = binascii.a2b_base64
    for raw, message_id in zip(raw_items, message_ids):
        if type(raw) is not dict or not raw.keys() <= PLAIN_PUSH_FIELDS:
            return None
        queue = raw.get("queue")
        partition = raw.get("partition", DEFAULT_PARTITION)
        txn = raw.get("transactionId", message_id)
        trace_id = raw.get("traceId")
        payload_text = raw.get("payloadB64")
        if not (type(queue) is str and 0 < len(queue) <= within and type(partition) is str
                and 0 < len(partition) <= within and type(txn) is str and 0 < len(txn) <= within
                and (trace_id is None or (type(trace_id) is str and trace_id))
                and type(payload_text) is str):
            return None
        try:
            payload = a2b(payload_text, strict_mode=True)  # codec.decode_base64 of a str, inlined
        except ValueError:
            return None
        append([queue, partition, payload, txn, message_id, trace_id, False])
    return rows


def queues_to_encrypt(serving: ServingNode, tenant: str, queues: set[str]) -> set[str]:
    """Which of `queues` have encryptionEnabled; ApiError if some do and this node has no key."""
    options = serving.groups[tenant].peek_local(lambda state: {q: state.queue_options(q) for q in queues})
    encrypting = {q for q, o in options.items() if o and o.get("encryptionEnabled")}
    if encrypting and serving.cipher is None:
        raise encryption_unavailable(encrypting)
    return encrypting


def encrypt_push_rows(serving: ServingNode, tenant: str, rows: list[list]) -> list[list]:
    """messages.encrypt_push_items for rows: the payloads of rows to queues with
    encryptionEnabled are encrypted here, by the proposing node (the rows are changed in place)."""
    encrypting = queues_to_encrypt(serving, tenant, {row[ROW_QUEUE] for row in rows})
    if not encrypting:
        return rows
    for row in rows:
        if row[ROW_QUEUE] in encrypting:
            row[ROW_PAYLOAD] = serving.cipher.encrypt(row[ROW_PAYLOAD])
            row[ROW_ENCRYPTED] = True
    return rows


def push_command(serving: ServingNode, tenant: str, producer_sub: str | None, rows: list[list]) -> dict:
    """The push command of `rows`: as rows once every member of the group applies them, else as
    the map of each (the older form, docs/commands.md)."""
    if serving.groups[tenant].peers_apply(PUSH_ROWS_LEVEL):
        return {"op": "push", "producerSub": producer_sub, "rows": rows}
    return {"op": "push", "producerSub": producer_sub, "items": [dict(zip(PUSH_ROW_FIELDS, row)) for row in rows]}
