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


@pytest.mark.parametrize("bare", [3600, -1, 86_400_000])
def test_a_bare_integer_is_refused_with_the_units_to_write(bare):
    with pytest.raises(TypeError, match=f"'{bare}ms', '{bare}s'.*timedelta"):
        duration_ms(bare)
    with pytest.raises(TypeError):
        duration_seconds(bare)


def test_zero_is_the_one_integer_taken_it_is_the_same_in_every_unit():
    assert duration_ms(0) == 0 and duration_seconds(0) == 0


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
    with pytest.raises(ValueError, match="whole number of seconds"):
        duration_seconds("250ms")
