"""A fault that repeats, logged as an episode: its first occurrence at once, then at most one line
every interval with how many occurred since the last line. A persistent fault on the tick thread
(a peer's messages, a leader's transfers) repeats many times a second; a line per occurrence would
flood the log and hide everything else in it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOG_EVERY_S = 60.0


class ThrottledLog:
    def __init__(self, logger: logging.Logger, interval_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0

    def note(self, level: int, message: str, *args) -> bool:
        """One occurrence: logged (True) unless a line went out less than interval_s ago."""
        now = self._clock()
        if self._logged_at is not None and now - self._logged_at < self.interval_s:
            self._unlogged += 1
            return False
        more = f" ({self._unlogged} more since the last line)" if self._unlogged else ""
        self._logger.log(level, message + "%s", *args, more)
        self._logged_at, self._unlogged = now, 0
        return True

    def end_episode(self) -> None:
        """The fault went away: its next occurrence is logged at once."""
        self._logged_at, self._unlogged = None, 0
