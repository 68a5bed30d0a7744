"""Absolute instants (`.at(datetime)`) turned into the wire's `delayMs` against the group clock.

The server takes only a delay: `deliverAt = group now + delayMs`. Each schedule answer tells the
group's now (`deliverAt - delayMs`), so the SDK keeps the offset between the group clock and this
process's clock from the latest answer and converts an instant with it. Before any answer it
assumes no offset. What remains is the skew between the two clocks since that answer, plus the
round trip of the call that carries the delay (docs/sdk.md, Timers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime


def instant_ms(instant: datetime) -> int:
    """Milliseconds since the epoch. A naive datetime is refused: its zone is a guess."""
    if not isinstance(instant, datetime):
        raise TypeError(f"an instant is a timezone-aware datetime, got {type(instant).__name__}")
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise TypeError(f"{instant!r} is a naive datetime: give it a zone, e.g. datetime.now(timezone.utc) "
                        "or datetime(2030, 1, 1, 9, 0, tzinfo=ZoneInfo('Europe/Paris'))")
    return round(instant.timestamp() * 1000)


def local_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class GroupClock:
    """The group clock as last seen from this client: `offset_ms` = group now - local now."""

    offset_ms: int = 0
    observed: bool = False

    def observe(self, delay_ms: int, deliver_at: int, answered_at_ms: int) -> None:
        self.offset_ms = (deliver_at - delay_ms) - answered_at_ms
        self.observed = True

    def delay_until(self, instant: datetime, now_ms: int | None = None) -> int:
        """The delayMs that makes deliverAt the instant, on the group clock as last seen; 0 for an
        instant already past (the server refuses a negative delayMs, and 0 fires at once)."""
        local = local_ms() if now_ms is None else now_ms
        return max(0, instant_ms(instant) - (local + self.offset_ms))
