"""What makes the OpenAPI document generate usable clients: a stable `operationId` on every
operation (generators name their functions after it) and a `type` beside every `const` and `enum`
(some generators emit broken code for a typeless `const: false`)."""

from __future__ import annotations

from typing import Any

# (method, path) -> operationId. Explicit, not derived from the path: renaming a route must not
# silently rename every generated client function.
OPERATION_IDS = {
    ("post", "/api/v1/timers"): "scheduleTimers",
    ("get", "/api/v1/timers/{queue}"): "listTimers",
    ("get", "/api/v1/timers/{queue}/{timerKey}"): "peekTimer",
    ("delete", "/api/v1/timers/{queue}/{timerKey}"): "cancelTimer",
    ("post", "/api/v1/push"): "push",
    ("get", "/api/v1/pop/queue/{queue}"): "pop",
    ("get", "/api/v1/pop/queue/{queue}/partition/{partition}"): "popPartition",
    ("post", "/api/v1/pop/queue/{queue}"): "ackAndPop",
    ("post", "/api/v1/pop/queue/{queue}/partition/{partition}"): "ackAndPopPartition",
    ("post", "/api/v1/ack"): "ack",
    ("post", "/api/v1/ack/batch"): "ackBatch",
    ("post", "/api/v1/lease/{leaseId}/extend"): "extendLease",
    ("post", "/api/v1/fetch"): "fetch",
    ("post", "/api/v1/configure"): "configureQueue",
    ("post", "/api/v1/transaction"): "transaction",
    ("post", "/api/v1/kv"): "kvBatch",
    ("get", "/api/v1/kv/{ns}/{key}"): "kvGet",
    ("put", "/api/v1/kv/{ns}/{key}"): "kvPut",
    ("delete", "/api/v1/kv/{ns}/{key}"): "kvDelete",
    ("get", "/api/v1/dlq"): "listDlq",
    ("post", "/api/v1/dlq/{dlqId}/replay"): "replayDlq",
    ("post", "/api/v1/admin/timers/pause"): "pauseScheduling",
    ("post", "/api/v1/admin/timers/resume"): "resumeScheduling",
    ("get", "/api/v1/usage"): "usage",
    ("get", "/api/v1/admin/snapshot"): "tenantSnapshot",
    ("get", "/api/v1/openapi.json"): "openapiDocument",
    ("get", "/health"): "health",
    ("get", "/metrics"): "metrics",
    ("get", "/api/v1/overview"): "overview",
    ("get", "/dashboard"): "dashboardPage",
    ("get", "/dashboard/{name}"): "dashboardFile",
}

_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (type(None), "null"),
               (list, "array"), (dict, "object"))


def json_type(value: Any) -> str:
    for python_type, name in _JSON_TYPES:  # bool before int: True is an int to Python
        if isinstance(value, python_type):
            return name
    raise TypeError(f"{value!r} is no JSON value")


def add_types(schema: Any) -> None:
    """Every `const` or `enum` without a `type` gets the type(s) of its values, in place."""
    if isinstance(schema, list):
        for item in schema:
            add_types(item)
        return
    if not isinstance(schema, dict):
        return
    if "type" not in schema and ("const" in schema or "enum" in schema):
        values = [schema["const"]] if "const" in schema else schema["enum"]
        names = sorted({json_type(v) for v in values})
        schema["type"] = names[0] if len(names) == 1 else names
    for value in schema.values():
        add_types(value)


def add_operation_ids(paths: dict) -> None:
    """In place; a KeyError names an operation that has none (a new route must be named here)."""
    for path, methods in paths.items():
        for method, operation in methods.items():
            operation["operationId"] = OPERATION_IDS[(method, path)]
