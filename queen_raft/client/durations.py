"""Durations as people write them ("250ms", "15m", "7d", timedelta) and as the wire carries them.

The product's rule (docs/spec.md section 2): durations that can be sub-second travel in milliseconds
(`delayMs`), the ones that cannot in seconds (`ttlSeconds`). The SDK accepts one input language for
both: a string with units ("3600ms", "1h") or a `timedelta`.

A bare integer is refused (TypeError), except 0: Python's own APIs read `sleep(3600)` as seconds,
the wire reads `delayMs: 3600` as milliseconds, so `delay(3600)` would be a trap whichever way the
SDK read it. A unit written in the call is never ambiguous. 0 is the same in every unit.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Union

# The type of every duration parameter: a type checker flags `delay(3600)` before it runs. At run
# time the integer 0 is taken too (DurationLike).
Duration = Union[str, timedelta]
DurationLike = Union[str, timedelta, int]

INTEGER_REFUSED = ("a bare integer is no duration ({value!r} ms or {value!r} s?): write the unit, "
                   "use '{value}ms', '{value}s', '1h' or a timedelta")

MS_PER_UNIT = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# One or more <number><unit> parts: "250ms", "1h30m", "1.5s". Units are lower case so "m" (minute)
# and "M" (a month, which has no fixed length) can never be confused.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")


def duration_ms(value: DurationLike) -> int:
    """Milliseconds, exactly: a duration that is not a whole number of ms is refused, not rounded."""
    if isinstance(value, bool):  # bool is an int subclass; True is not "1 ms"
        raise TypeError("a duration is a string like '15m' or a timedelta, not a bool")
    if isinstance(value, int):
        if value == 0:
            return 0
        raise TypeError(INTEGER_REFUSED.format(value=value))
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
    raise TypeError(f"a duration is a string like '3600ms' or '1h', or a timedelta, got {type(value).__name__}")


def duration_seconds(value: DurationLike) -> int:
    """Whole seconds (KV `ttlSeconds`, lease extension)."""
    ms = duration_ms(value)
    if ms % 1_000:
        raise ValueError(f"{value!r} is {ms} ms, not a whole number of seconds")
    return ms // 1_000
