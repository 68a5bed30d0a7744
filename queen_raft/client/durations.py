"""Durations as people write them ("250ms", "15m", "7d", timedelta) and as the wire carries them.

The product's rule (docs/spec.md section 2): durations that can be sub-second travel in milliseconds
(`delayMs`), the ones that cannot in seconds (`ttlSeconds`). The SDK accepts one input language for
both: a string with units, a `timedelta`, or an integer, which is always milliseconds.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Union

Duration = Union[str, int, timedelta]

MS_PER_UNIT = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# One or more <number><unit> parts: "250ms", "1h30m", "1.5s". Units are lower case so "m" (minute)
# and "M" (a month, which has no fixed length) can never be confused.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")


def duration_ms(value: Duration) -> int:
    """Milliseconds, exactly: a duration that is not a whole number of ms is refused, not rounded."""
    if isinstance(value, bool):  # bool is an int subclass; True is not "1 ms"
        raise TypeError("a duration is a string like '15m', an integer of milliseconds or a timedelta, not a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros % 1_000:
            raise ValueError(f"{value!r} is not a whole number of milliseconds")
        return micros // 1_000
    if isinstance(value, str):
        text = value.strip()
        sign = -1 if text.startswith("-") else 1
        body = text[1:] if sign < 0 else text
        if not _WHOLE.fullmatch(body):
            raise ValueError(f"duration {value!r} is not like '250ms', '30s', '15m', '72h', '7d' or '1h30m'")
        total = 0.0
        for number, unit in _PART.findall(body):
            total += float(number) * MS_PER_UNIT[unit]
        if total != int(total):
            raise ValueError(f"duration {value!r} is not a whole number of milliseconds")
        return sign * int(total)
    raise TypeError(f"a duration is a string like '15m', an integer of milliseconds or a timedelta, got {type(value).__name__}")


def duration_seconds(value: Duration) -> int:
    """Whole seconds (KV `ttlSeconds`, lease extension). An integer is still milliseconds, so
    `ttl=5` is refused rather than silently read as 5 ms or 5 s."""
    ms = duration_ms(value)
    if ms % 1_000:
        raise ValueError(f"{value!r} is {ms} ms, not a whole number of seconds (integers are milliseconds: write '5s')")
    return ms // 1_000
