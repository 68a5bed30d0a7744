"""What clients (and the machine) get wrong, in the node's log at most once per interval, counted.

A malformed request, a client gone mid-body or a connection shed at the limit is the client's
business; a traceback for each, as aiohttp and asyncio log them, lets a flood of them fill the disk
and bury the node's own messages. Each kind is counted instead, and one warning line per interval
carries the counts and the latest detail. The first event after a quiet interval is logged at
once, so a lone mistake is still visible when it happens; the node logs what is left at its stop.

Exceptions that are not the client's (a bug in a route) still reach the log with their traceback.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

from aiohttp import http_exceptions

INTERVAL_S = 10.0
# errno values of a process or system out of descriptors or buffers: asyncio's accept and
# pysyncobj's tick retry by themselves; only the log needs taming.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ClientErrorLog:
    """Counts events by kind; logs a summary at most once per `interval_s`. Thread-safe."""

    def __init__(self, logger: logging.Logger, what: str = "client and connection errors",
                 interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic):
        self.logger = logger
        self.what = what
        self.interval_s = interval_s
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self.totals: Counter[str] = Counter()  # since start, for tests and metrics
        self.last_detail = ""
        self._next_at = -float("inf")
        self._flush_pending = False
        self._lock = threading.Lock()

    def note(self, kind: str, detail: str = "") -> None:
        with self._lock:
            self.counts[kind] += 1
            self.totals[kind] += 1
            if detail:
                self.last_detail = f"{kind}: {detail[:200]}"
            due = self.clock() >= self._next_at
            schedule = not due and not self._flush_pending
            if schedule:
                self._flush_pending = True
        if due:
            self.flush()
        elif schedule:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """The counts of an interval's tail are logged when it ends, not at the next event."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a thread without a loop: the next event after the interval logs them
            with self._lock:
                self._flush_pending = False
            return
        loop.call_later(max(0.0, self._next_at - self.clock()), self.flush)

    def flush(self) -> None:
        with self._lock:
            self._flush_pending = False
            if not self.counts:
                return
            total = sum(self.counts.values())
            kinds = ", ".join(f"{kind}: {count}" for kind, count in self.counts.most_common())
            detail, self.last_detail = self.last_detail, ""
            self.counts.clear()
            self._next_at = self.clock() + self.interval_s
        self.logger.warning("%s (at most one line per %g s): %d (%s)%s", self.what, self.interval_s, total, kinds,
                            f"; latest {detail}" if detail else "")


def client_error_kind(exc: BaseException | None) -> str | None:
    """The kind of a client's mistake, or None when the exception is not one."""
    if isinstance(exc, http_exceptions.HttpProcessingError):
        return "malformed request"
    if isinstance(exc, ConnectionError):
        return "client disconnected"
    return resource_error_kind(exc)


def resource_error_kind(exc: BaseException | None) -> str | None:
    if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
        return f"out of resources ({errno.errorcode.get(exc.errno, exc.errno)})"
    return None


class CountedServerLog(logging.LoggerAdapter):
    """The logger handed to aiohttp's request handlers: client mistakes are counted, the rest logged."""

    def __init__(self, logger: logging.Logger, errors: ClientErrorLog):
        super().__init__(logger, {})
        self.errors = errors

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        exc = sys.exc_info()[1] if exc_info is True else exc_info if isinstance(exc_info, BaseException) else None
        kind = client_error_kind(exc)
        if kind is None:
            super().log(level, msg, *args, **kwargs)
        elif level >= logging.INFO:
            self.errors.note(kind, f"{type(exc).__name__}: {exc}".replace("\n", " "))


class CountResourceErrors(logging.Filter):
    """On a library's logger (pysyncobj's tick thread): out-of-descriptor tracebacks are counted."""

    def __init__(self, errors: ClientErrorLog):
        super().__init__()
        self.errors = errors

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        kind = resource_error_kind(exc)
        if kind is None:
            return True
        self.errors.note(kind, f"{record.getMessage()}: {exc}")
        return False


def loop_exception_handler(errors: ClientErrorLog) -> Callable[[asyncio.AbstractEventLoop, dict], None]:
    """asyncio's handler, except that out-of-descriptor accepts (logged with a traceback each time
    the server retries) and client disconnects are counted."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        kind = client_error_kind(context.get("exception"))
        if kind is None:
            loop.default_exception_handler(context)
            return
        errors.note(kind, f"{context.get('message', '')}: {context.get('exception')}")

    return handle
