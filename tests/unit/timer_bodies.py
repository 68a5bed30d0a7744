"""Timer operations as a client sends them in a POST /api/v1/timers body, shared by the timer route
tests (test_api_timers.py, test_api_timers_parse.py, test_api_timers_gates.py)."""

from __future__ import annotations

import base64

PAYLOAD = base64.b64encode(b'{"hi":1}').decode()


def schedule(key: str = "k1", queue: str = "q", **fields) -> dict:
    op = {"op": "schedule", "queue": queue, "timerKey": key, "delayMs": 300, "txn": f"txn-{key}", "payload": PAYLOAD}
    op.update(fields)
    return op


def cancel(key: str = "k1", queue: str = "q", **fields) -> dict:
    return {"op": "cancel", "queue": queue, "timerKey": key, **fields}

