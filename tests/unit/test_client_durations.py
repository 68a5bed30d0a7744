"""Durations: the strings, integers and timedeltas the SDK accepts, and what the wire gets."""

from __future__ import annotations

from datetime import timedelta

import pytest

from queen_raft.client.durations import duration_ms, duration_seconds


@pytest.mark.parametrize("text, expected_ms", [
    ("250ms", 250), ("30s", 30_000), ("15m", 900_000), ("72h", 259_200_000), ("7d", 604_800_000),
    ("0s", 0), ("1h30m", 5_400_000), ("1.5s", 1_500), ("-5s", -5_000), (" 2m ", 120_000),
])
def test_strings_with_units_are_milliseconds(text, expected_ms):
    assert duration_ms(text) == expected_ms


def test_integers_are_milliseconds_and_may_be_negative():
    assert duration_ms(86_400_000) == 86_400_000
    assert duration_ms(-1) == -1


def test_timedelta_is_exact():
    assert duration_ms(timedelta(hours=24)) == 86_400_000
    assert duration_ms(timedelta(milliseconds=250)) == 250
    assert duration_ms(timedelta(seconds=-2)) == -2_000


@pytest.mark.parametrize("bad", ["", "15", "15M", "1 h", "ms", "1.0005s", "3w", "1h-30m", "--1s"])
def test_malformed_strings_are_refused(bad):
    with pytest.raises(ValueError):
        duration_ms(bad)


def test_sub_millisecond_timedelta_is_refused_not_rounded():
    with pytest.raises(ValueError):
        duration_ms(timedelta(microseconds=1500))


@pytest.mark.parametrize("bad", [True, 1.5, None, [1]])
def test_other_types_are_refused(bad):
    with pytest.raises(TypeError):
        duration_ms(bad)


def test_seconds_for_ttls_are_whole():
    assert duration_seconds("7d") == 604_800
    assert duration_seconds(timedelta(minutes=1)) == 60
    assert duration_seconds(5_000) == 5  # an integer is still milliseconds
    with pytest.raises(ValueError, match="whole number of seconds"):
        duration_seconds(5)  # 5 ms: the usual slip of meaning seconds
    with pytest.raises(ValueError):
        duration_seconds("250ms")
