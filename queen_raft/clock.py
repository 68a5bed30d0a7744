"""The node's wall clock, the only time a proposer stamps into a command.

The fault harness skews one node's clock to measure what skew does to fires (docs/spec.md section 1:
a node whose clock runs ahead can fire early by its skew). A skew is a test hook: it is honoured
only when QUEEN_TEST_HOOKS=1, and a node that finds an offset without the flag refuses to start,
so a stray environment variable can never move a production clock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

TEST_HOOKS_ENV = "QUEEN_TEST_HOOKS"
TEST_CLOCK_OFFSET_ENV = "QUEEN_TEST_CLOCK_OFFSET_MS"

_offset_lock = threading.Lock()
_offset_ms: int | None = None  # None: not read from the environment yet


def test_hooks_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(TEST_HOOKS_ENV) == "1"


def offset_from_environment(environ: Mapping[str, str] = os.environ) -> int:
    """The configured skew in ms; ValueError when it is set without the test-hooks flag."""
    raw = environ.get(TEST_CLOCK_OFFSET_ENV)
    if raw is None or raw == "":
        return 0
    if not test_hooks_enabled(environ):
        raise ValueError(
            f"{TEST_CLOCK_OFFSET_ENV} is set but {TEST_HOOKS_ENV}=1 is not: "
            "a clock offset is a test hook and is refused outside tests"
        )
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{TEST_CLOCK_OFFSET_ENV} must be an integer number of ms, got {raw!r}") from exc


def _current_offset() -> int:
    global _offset_ms
    offset = _offset_ms
    if offset is None:
        with _offset_lock:
            if _offset_ms is None:
                _offset_ms = offset_from_environment()
            offset = _offset_ms
    return offset


def wall_ms() -> int:
    """Milliseconds since the epoch on this node, plus the test skew when hooks are on."""
    return time.time_ns() // 1_000_000 + _current_offset()


def set_offset_ms(ms: int) -> None:
    """Move this node's clock by ms at runtime (fault harness only; needs QUEEN_TEST_HOOKS=1)."""
    global _offset_ms
    if not test_hooks_enabled():
        raise ValueError(f"set_offset_ms needs {TEST_HOOKS_ENV}=1")
    with _offset_lock:
        _offset_ms = int(ms)


def offset_ms() -> int:
    return _current_offset()
