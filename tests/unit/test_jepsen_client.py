"""How answers become history types: only what certainly did not happen is `fail`."""

from __future__ import annotations

from jepsen.client import classify
from jepsen.history import FAIL, INFO, OK


def unavailable(reason_text: str) -> dict:
    return {"error": "timers_unavailable",
            "message": f"the tenant's group cannot answer now ({reason_text}); the outcome may be unknown"}


def test_success_and_refusals():
    assert classify(200, {"results": []}) == OK
    assert classify(400, {"error": "timers_bad_request"}) == FAIL
    assert classify(429, {"error": "rate_limited"}) == FAIL
    assert classify(503, {"error": "timers_disabled"}) == FAIL


def test_unavailable_before_proposing_is_fail_and_after_is_info():
    assert classify(503, unavailable("no_leader")) == FAIL
    assert classify(503, unavailable("busy: 9 calls in flight")) == FAIL
    assert classify(503, unavailable("leader_changed: pysyncobj FAIL_REASON 3")) == INFO
    assert classify(503, unavailable("timeout: no commit within 5000 ms")) == INFO


def test_unknown_5xx_stays_info():
    assert classify(503, {"error": "timers_unavailable", "message": "reworded"}) == INFO
    assert classify(500, {"error": "internal"}) == INFO
    assert classify(502, None) == INFO
