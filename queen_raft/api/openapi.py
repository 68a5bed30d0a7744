"""The OpenAPI 3.1 document of every route, built from the limits the routes enforce.

One module, shared: `GET /api/v1/openapi.json` serves `document()`, the conformance test validates
real answers against `response_schema()`, and the fuzz run generates requests from it. The schemas
are openapi_schemas.py; the bounds come from the route modules, so a limit changed there changes here.
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from typing import Any

from aiohttp import web

from queen_raft.api import dashboard, dlq, harness_hooks, kv, messages, overview, snapshot_route, timers, transaction
from queen_raft.api.health import PROBLEMS as HEALTH_PROBLEMS
from queen_raft.api.openapi_names import add_operation_ids, add_types
from queen_raft.api.openapi_schemas import (
    ANY,
    API_VERSION,
    BOOL,
    INT,
    KV_VALUE,
    NAME,
    NAME_IN_URL,
    NON_EMPTY,
    NON_NEG,
    NULL_INT,
    NULL_STR,
    OPENAPI_VERSION,
    PUSH_VERDICT,
    REF,
    SCHEMAS,
    STR,
    array,
    obj,
    ref,
)
from queen_raft.api.requests import json_response
from queen_raft.raft.peer_links import FRAME_KINDS as PEER_LINK_FRAMES


UNAUTHORIZED = ("401", "missing or unknown bearer token")
FORBIDDEN = ("403", "the token's level does not allow this route")
BAD = ("400", "the request is malformed (not JSON, a lone surrogate in a string, a bad field); nothing was proposed")
TOO_BIG = ("413", "payload_too_large: the body is over the HTTP ceiling, or the call over the Raft entry bound; "
                  "answer_too_large: the answer would carry over MAX_ANSWER_BYTES (16 MiB) of payloads or values "
                  "(KV batch, fetch)")
UNAVAILABLE_503 = ("503", "no leader, or the entry not committed in time: the outcome may be unknown; retry "
                          "after Retry-After (writes are idempotent)")
STANDARD_ERRORS = (UNAUTHORIZED, FORBIDDEN, BAD, TOO_BIG, UNAVAILABLE_503)
# Every route with a body: the body's own refusals (api/body.py).
BODY_ERRORS = (("408", "request_timeout: the body did not arrive within QUEEN_HTTP_BODY_TIMEOUT_S"),
               ("415", "unsupported_encoding: a Content-Encoding other than identity, gzip, x-gzip, deflate, zstd"))
RETRY_AFTER = {"Retry-After": {"schema": {"type": "string"}, "description": "whole seconds"}}
HINT = {"x-queen-timers-hint": {"schema": {"type": "string"},
                                "description": "DELETE /api/v1/timers/{queue}/{timerKey}, which the gate never refuses"}}


def json_content(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def error(description: str, headers: dict | None = None, schema: str = "Error") -> dict:
    answer: dict[str, Any] = {"description": description, "content": json_content(ref(schema))}
    if headers:
        answer["headers"] = headers
    return answer


def operation(summary: str, ok: dict, errors: tuple = STANDARD_ERRORS, body: dict | None = None,
              params: list | None = None, ok_status: str = "200", public: bool = False,
              extra: dict | None = None, tag: str = "queen") -> dict:
    responses: dict[str, Any] = {ok_status: {"description": "answered", "content": json_content(ok)}}
    for status, description in errors:
        headers = RETRY_AFTER if status in ("429", "503") else None
        responses[status] = error(description, headers, "Unavailable" if status == "503" else "Error")
    if body is not None:
        for status, description in BODY_ERRORS:
            responses.setdefault(status, error(description))
    responses.update(extra or {})
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, "content": json_content(body)}
    if params:
        op["parameters"] = params
    if public:
        op["security"] = []
    return op


# A path segment holds no "/" and is not "." or ".." (HTTP clients normalize those away): a name
# that breaks these rules cannot be addressed in a URL by any client, so the document says so.
SEGMENT = r"[^/]*[^/.][^/]*"
SEGMENT_PARAM = {"type": "string", "pattern": f"^{SEGMENT}$"}
# The catch-alls (timerKey, key) hold "/" between such segments: tenant/42 is one key.
CATCH_ALL_PARAM = {"type": "string", "pattern": f"^{SEGMENT}(/{SEGMENT})*$"}


def path_param(name: str, description: str = "", catch_all: bool = False) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": CATCH_ALL_PARAM if catch_all else SEGMENT_PARAM,
            "description": description}


def name_path_param(name: str) -> dict:
    """A path segment that is a name (queue, partition): bounded like NAME, said in words only."""
    return dict(path_param(name), description=NAME["description"])


def query_param(name: str, schema: dict, description: str = "") -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _paths() -> dict:
    queue, key = name_path_param("queue"), path_param("timerKey", "a catch-all: tenant/42 is one key; URL-decoded once", True)
    ns, kv_key = path_param("ns"), path_param("key", "a catch-all, like timerKey", True)
    timer_results = obj({"results": array(ref("TimerResult"))}, ("results",))
    kv_results = obj({"results": array(ref("KvRow"))}, ("results",))
    ack_body = obj({
        "consumerGroup": NAME, "leaseId": NON_EMPTY,
        "acknowledgments": array(ref("Acknowledgment"), 1, messages.MAX_ACK_ITEMS),
    }, ("acknowledgments", "leaseId"))
    ack_answer = obj({"results": array(ref("AckVerdict"))}, ("results",))
    transaction_ok = {"oneOf": [
        obj({"success": {"const": True}, "results": array({"anyOf": [
            ref("PushVerdict"), ref("AckVerdict"), ref("KvRow"), ref("TimerResult")]})}, ("success", "results")),
        obj({"success": {"const": False}, "reason": {"enum": [
            "rejected_ack", "duplicate", "kv_precondition", "bad_request", "too_large", "timers_quota_exceeded",
            "timer_not_pending", "payload_too_large"]},
            "error": STR, "index": NON_NEG}, ("success", "reason", "error")),
    ]}
    pop_params = [
        query_param("consumerGroup", NAME_IN_URL, "none: the queue-mode group"),
        query_param("batch", {"type": "integer", "minimum": 1, "maximum": messages.MAX_POP_BATCH},
                    "at most this many; fewer when their payloads would pass MAX_ANSWER_BYTES (16 MiB), "
                    "and always one"),
        query_param("wait", BOOL, "long poll until a message or the timeout"),
        query_param("timeout", {"type": "integer", "minimum": 0, "maximum": messages.MAX_POP_TIMEOUT_MS}, "ms"),
        query_param("autoAck", BOOL),
    ]
    pop_answer = obj({"leaseId": NULL_STR, "messages": array(ref("Message"))}, ("leaseId", "messages"))
    pop_extra = {"204": {"description": "nothing to deliver after the wait"}}
    # POST pop: the ack batch's body settled first, then the pop, in one entry; never 204.
    ack_pop_answer = obj({"leaseId": NULL_STR, "messages": array(ref("Message")),
                          "acknowledgments": array(ref("AckVerdict"))}, ("leaseId", "messages", "acknowledgments"))
    ack_pop_summary = ("Settle acknowledgments, then pop (one entry): the ack batch's body; consumerGroup, when "
                       "given, must be the query's; with nothing to deliver after the wait, 200 with messages []")
    usage = obj({
        "tenant": STR, "billedMessages": NON_NEG, "pushedMessages": NON_NEG, "pendingTimers": NON_NEG,
        "fired": obj({name: NON_NEG for name in ("appended", "duplicate", "failed", "dlq")},
                     ("appended", "duplicate", "failed", "dlq")),
        "schedulingPaused": BOOL,
    }, ("tenant", "billedMessages", "pushedMessages", "pendingTimers", "fired", "schedulingPaused"))
    paused = obj({"tenant": STR, "paused": BOOL}, ("tenant", "paused"))
    group_status = obj({"role": NULL_STR, "leader": NULL_STR, "term": NULL_INT, "commitIndex": NULL_INT,
                        "appliedIndex": NULL_INT, "problem": {"enum": [None, *HEALTH_PROBLEMS], "description": (
                            "why the group is unhealthy on this node: state_not_loaded, not_applying (applied "
                            "index stuck behind the commit index), disk_full (refuses writes, serves reads), "
                            "term_not_stored (cannot store a new Raft term or vote: follows no newer leader)")},
                        "peerLinks": {"type": "object", "additionalProperties": {"enum": list(PEER_LINK_FRAMES)},
                                      "description": "Raft address of each peer: how this node's link to it is framed "
                                                     "(aead, fernet, plain, or none while there is no link)"}})
    health = obj({"status": {"enum": ["healthy", "settling", "unhealthy"]}, "node": STR, "cluster": STR,
                  "groups": {"type": "object", "additionalProperties": group_status}}, ("status", "node", "groups"))
    return {
        "/api/v1/timers": {"post": operation(
            "Schedule, reschedule or cancel timers: one batch, one entry", timer_results,
            body={"oneOf": [obj({"operations": array(ref("TimerOp"), 1, None)}, ("operations",)),
                            array(ref("TimerOp"), 1, None)],
                  "description": "at most QUEEN_TIMERS_MAX_OPS_PER_CALL operations (default 256)"},
            errors=(UNAUTHORIZED, ("403", "forbidden (also: a write-only token's batch holding a cancel), timers_quota_exceeded "
                           "or timer_horizon_exceeded"),
                    ("400", "timers_bad_request"), ("413", "payload_too_large (over QUEEN_TIMERS_MAX_PAYLOAD_BYTES, or over the "
                                                            "destination queue's maxPayloadBytes)"),
                    ("429", "rate_limited (per node, per tenant)"),
                    ("503", "timers_disabled (an operator paused scheduling) or timers_unavailable")),
            extra=None)},
        "/api/v1/timers/{queue}": {"get": operation(
            "List a queue's pending timers by timerKey (keyset)", ref("TimerList"),
            params=[queue, query_param("after", STR, "exclusive cursor"),
                    query_param("prefix", STR, "only the keys that start with it (empty: all); pages with after"),
                    query_param("limit", {"type": "integer"}, f"clamped to 1..{timers.LIST_MAX_LIMIT}")])},
        "/api/v1/timers/{queue}/{timerKey}": {
            "get": operation("Peek one timer (payload as stored, never decrypted); with none pending, where its "
                             "remembered fire went (status fired or dead_lettered) or status absent",
                             ref("TimerPeek"), params=[queue, key]),
            "delete": operation("Cancel one timer; never refused by the pause, the rate or the quota; with none "
                                "pending, 200 ok false with status fired (and where the message is), "
                                "dead_lettered or absent",
                                ref("TimerResult"), params=[queue, key, query_param("txn", STR, "echoed")]),
        },
        "/api/v1/push": {"post": operation(
            "Push messages; a verdict per item", obj({"results": array(ref("PushVerdict"))}, ("results",)),
            body=obj({"items": array(ref("PushItem"), 1, messages.MAX_PUSH_ITEMS)}, ("items",)), ok_status="201")},
        "/api/v1/pop/queue/{queue}": {
            "get": operation("Pop (takes a lease, a write)", pop_answer, params=[queue, *pop_params], extra=pop_extra),
            "post": operation(ack_pop_summary, ack_pop_answer, body=ack_body, params=[queue, *pop_params])},
        "/api/v1/pop/queue/{queue}/partition/{partition}": {
            "get": operation("Pop one partition", pop_answer, params=[queue, name_path_param("partition"), *pop_params],
                             extra=pop_extra),
            "post": operation(ack_pop_summary, ack_pop_answer, body=ack_body,
                              params=[queue, name_path_param("partition"), *pop_params])},
        "/api/v1/ack": {"post": operation(
            "Acknowledge (single form, or the batch form)", ack_answer,
            body={"oneOf": [ack_body, obj({**SCHEMAS["Acknowledgment"]["properties"], "consumerGroup": NAME,
                                           "leaseId": NON_EMPTY}, ("leaseId",))]})},
        "/api/v1/ack/batch": {"post": operation("Acknowledge many: completed, failed, retry, dlq", ack_answer,
                                                body=ack_body)},
        "/api/v1/lease/{leaseId}/extend": {"post": operation(
            "Extend a lease", obj({"ok": BOOL, "leaseId": STR, "expiresAt": INT}, ("ok", "leaseId", "expiresAt")),
            body=obj({"seconds": {"type": "integer", "minimum": 1, "maximum": messages.MAX_LEASE_EXTEND_S}},
                     ("seconds",)),
            params=[path_param("leaseId")],
            errors=(*STANDARD_ERRORS, ("404", "invalid_lease: unknown, expired or released")))},
        "/api/v1/fetch": {"post": operation(
            "Read partitions back by offset (no lease, linearizable)",
            obj({"entries": array(obj({"records": array(ref("Record"))}, ("records",)))}, ("entries",)),
            body=obj({"entries": array(obj({
                "queue": NAME, "partition": NAME, "offset": NON_NEG, "limit": {"type": "integer"},
            }, ("queue",)), 1, messages.MAX_FETCH_ENTRIES)}, ("entries",)))},
        "/api/v1/configure": {"post": operation(
            "Set a queue's options (merge or replace)",
            obj({"queue": STR, "options": ref("QueueOptions")}, ("queue", "options")),
            body=obj({"queue": NAME, "options": ref("QueueOptions"), "mode": {"enum": ["merge", "replace"]}},
                     ("queue",)))},
        "/api/v1/transaction": {"post": operation(
            "Pushes, acks, KV and timer ops in one entry, all or nothing", transaction_ok,
            body=obj({
                "operations": array(ref("TransactionOperation")), "kv": array(ref("KvOp")),
                "timers": array(ref("TimerOp")),
                "requiredLeases": {**array(NON_EMPTY, 0, transaction.MAX_TRANSACTION_ITEMS),
                                   "description": "leaseIds that must be alive (held, not expired), "
                                                  "else the transaction is rolled back: rejected_ack"},
            }),
            errors=(UNAUTHORIZED, FORBIDDEN, ("400", "bad_request (with success: false, reason, index)"),
                    ("413", "too_large: over the Raft entry bound or the HTTP ceiling; answer_too_large: its kv results "
                            "would carry over MAX_ANSWER_BYTES (16 MiB) of values"),
                    ("503", "timers_disabled (schedules while paused) or unavailable")))},
        "/api/v1/kv": {"post": operation(
            "A KV batch, all or nothing", kv_results,
            body=obj({"ops": array(ref("KvOp"), 1, kv.MAX_KV_OPS)}, ("ops",)),
            errors=(*STANDARD_ERRORS, ("409", "kv_precondition, with the failed op's index")))},
        "/api/v1/kv/{ns}/{key}": {
            "get": operation("Read one key (linearizable); found: false when absent", ref("KvRow"),
                             params=[ns, kv_key]),
            "put": operation("Write one key", ref("KvRow"), params=[ns, kv_key],
                             body=obj({"value": KV_VALUE, "ttlSeconds": {"type": "integer", "minimum": 1,
                                                                     "maximum": kv.MAX_KV_TTL_S},
                                       "forever": BOOL}, ("value",))),
            "delete": operation("Delete one key; found says whether a live key was deleted", ref("KvRow"),
                                params=[ns, kv_key]),
        },
        "/api/v1/dlq": {"get": operation(
            "Dead-letter rows in filing order (dlq-<n> ascending), payload as stored; keyset pages",
            obj({"rows": array(ref("DlqRow")), "truncated": BOOL, "nextAfter": NULL_STR},
                ("rows", "truncated", "nextAfter")),
            params=[query_param("queue", STR, "none: every queue"),
                    query_param("after", {"type": "string", "pattern": "^dlq-[0-9]+$"},
                                "exclusive cursor: the previous page's nextAfter"),
                    query_param("limit", {"type": "integer"}, f"clamped to 1..{dlq.DLQ_MAX_LIMIT}")])},
        "/api/v1/dlq/{dlqId}/replay": {"post": operation(
            "Push a dead-lettered message again (a new messageId, also its transactionId)", PUSH_VERDICT,
            params=[path_param("dlqId")],
            errors=(*STANDARD_ERRORS, ("404", "not_found"), ("409", "dlq_replay_refused: a timer's row")))},
        "/api/v1/admin/timers/pause": {"post": operation("Pause timer scheduling (admin)", paused, tag="admin")},
        "/api/v1/admin/timers/resume": {"post": operation("Resume timer scheduling (admin)", paused, tag="admin")},
        "/api/v1/usage": {"get": operation("Billed messages and counters of the tenant (admin)", usage, tag="admin")},
        "/api/v1/admin/snapshot": {"get": _snapshot_operation()},
        "/api/v1/overview": {"get": operation(
            "The dashboard's figures of the token's tenant: nodes and groups, queues, counters, fire lag (any "
            "level that may read)", overview.ANSWER_SCHEMA, errors=(UNAUTHORIZED, FORBIDDEN, UNAVAILABLE_503))},
        "/api/v1/openapi.json": {"get": operation("This document", {"type": "object"}, errors=(), public=True)},
        "/dashboard": {"get": {"summary": "The operator's page (static HTML; its data comes from the JSON API)",
                               "security": [], "tags": ["queen"],
                               "responses": {"200": {"description": "the page",
                                                     "content": {"text/html": {"schema": STR}}}}}},
        "/dashboard/{name}": {"get": {"summary": "One of the page's files (app.js, style.css)", "security": [],
                                      "tags": ["queen"], "parameters": [{
                                          "name": "name", "in": "path", "required": True,
                                          "schema": {"enum": list(dashboard.PAGE_FILES)}}],
                                      "responses": {"200": {"description": "the file", "content": {
                                          kind: {"schema": STR} for kind in ("text/javascript", "text/css", "text/html")}},
                                          "404": error("not_found: no such file")}}},
        "/health": {"get": operation("Each group's Raft view from this node", health, errors=(), public=True,
                                     extra={"503": {"description": "settling: some group has no known leader; "
                                                                   "unhealthy: a group has a problem",
                                                    "content": json_content(health)}})},
        "/metrics": {"get": {"summary": "Prometheus text", "security": [], "tags": ["queen"],
                             "responses": {"200": {"description": "metrics",
                                                   "content": {"text/plain": {"schema": STR}}}}}},
    }


def _snapshot_operation() -> dict:
    op = operation("The tenant's state as snapshot bytes, after a read barrier (admin; backups)", ANY,
                   errors=(UNAUTHORIZED, FORBIDDEN, UNAVAILABLE_503), tag="admin")
    op["responses"]["200"] = snapshot_route.OPENAPI_OK
    return op


def _test_hook_paths() -> dict:
    """Routes registered only with QUEEN_TEST_HOOKS=1 (api/harness_hooks.py). Kept out of the
    served document, which describes the product; response_schema() still checks their answers."""
    clock_answer = obj({"node": STR, "offsetMs": INT, "wallMs": INT}, ("node", "offsetMs", "wallMs"))
    admin_only = (UNAUTHORIZED, ("403", "not an admin token"))
    return {
        harness_hooks.CLOCK_PATH: {
            "post": operation("TEST HOOK: move this node's clock by offsetMs (QUEEN_TEST_HOOKS=1 only)", clock_answer,
                              errors=(*admin_only, BAD),
                              body=obj({"offsetMs": {"type": "integer", "minimum": -harness_hooks.MAX_TEST_CLOCK_OFFSET_MS,
                                                     "maximum": harness_hooks.MAX_TEST_CLOCK_OFFSET_MS}}, ("offsetMs",)),
                              tag="test-hooks"),
            "get": operation("TEST HOOK: this node's clock offset (QUEEN_TEST_HOOKS=1 only)", clock_answer,
                             errors=admin_only, tag="test-hooks"),
        },
    }


TEST_HOOK_PATHS = _test_hook_paths()


@lru_cache(maxsize=1)
def _document() -> dict:
    paths = _paths()
    # A batch holding a cancel refused by the pause, the rate or the quota names the route that
    # always works (docs/spec.md section 2).
    for status in ("403", "429", "503"):
        answer = paths["/api/v1/timers"]["post"]["responses"][status]
        answer["headers"] = {**answer.get("headers", {}), **HINT}
    body = paths["/api/v1/transaction"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    add_operation_ids(paths)
    add_types([paths, SCHEMAS])
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "queen-raft", "version": API_VERSION,
                 "description": "A Raft-replicated timer service: schedule a message now, it is pushed "
                                "into a partitioned queue at its instant. Every error body is {error, message}."},
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "a tenant token: admin, read-write, read-only or write-only"}},
        },
        "security": [{"bearer": []}],
    }


def document() -> dict:
    """A fresh copy: callers (tests, the fuzz) may annotate it."""
    return copy.deepcopy(_document())


def response_schema(path: str, method: str, status: int) -> dict | None:
    """The JSON schema of one answer, with the components resolvable (for jsonschema), or None
    when the document names no JSON body for it."""
    paths = {**_document()["paths"], **TEST_HOOK_PATHS}
    responses = paths[path][method.lower()]["responses"]
    answer = responses.get(str(status))
    if answer is None:
        raise KeyError(f"{method} {path} documents no {status}")
    schema = answer.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    # Component refs rewritten to local $defs, so a plain 2020-12 validator resolves them.
    return json.loads(json.dumps({**schema, "$defs": SCHEMAS}).replace(f'"{REF}', '"#/$defs/'))


async def get_openapi(request: web.Request) -> web.Response:
    """The document with `servers` set to the address this node was asked on, so a client
    generated from it calls the node it was fetched from."""
    return json_response({**_document(), "servers": [{"url": f"{request.scheme}://{request.host}"}]})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/openapi.json", get_openapi)
