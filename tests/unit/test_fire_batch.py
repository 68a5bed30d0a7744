"""The adaptive fire batch (queen_raft/raft/fire_batch.py) and its setting, timer_fire_batch_max.

The rule alone: a full tick with more due doubles the next batch up to the ceiling, a tick cut by
the byte bound keeps it, a cleared backlog (or a failed tick) returns it to the base. The setting:
read from the file and the environment, checked against timer_fire_batch, handed to the tick.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queen_raft.config import ConfigError, Settings, parse_config
from queen_raft.raft.fire_batch import FireBatchBounds, next_fire_batch
from queen_raft.raft.settings import RaftSettings

from tests.unit.test_config import minimal

DEFAULT_BOUNDS = FireBatchBounds(256, 4096)


def with_settings(table: dict) -> dict:
    raw = minimal()
    raw["settings"] = table
    return raw


def test_full_ticks_double_the_batch_up_to_the_ceiling():
    batch, seen = DEFAULT_BOUNDS.base, []
    for _ in range(8):
        seen.append(batch)
        batch = next_fire_batch(DEFAULT_BOUNDS, batch, batch, batch, more_due=True)
    assert seen == [256, 512, 1024, 2048, 4096, 4096, 4096, 4096]


def test_a_cleared_backlog_or_a_failed_tick_returns_to_the_base():
    assert next_fire_batch(DEFAULT_BOUNDS, 4096, 4096, 4096, more_due=False) == 256
    assert next_fire_batch(DEFAULT_BOUNDS, 2048, 2048, 0, more_due=False) == 256


def test_a_tick_cut_by_the_byte_bound_keeps_the_batch():
    assert next_fire_batch(DEFAULT_BOUNDS, 1024, 1024, 300, more_due=True) == 1024


def test_ticks_in_flight_of_one_size_double_it_once():
    # Four ticks proposed at 256 before the first answer: each answer asks for 512, not 4096.
    batch = 256
    for _ in range(4):
        batch = next_fire_batch(DEFAULT_BOUNDS, batch, 256, 256, more_due=True)
    assert batch == 512


@given(base=st.integers(1, 5000), extra=st.integers(0, 5000), current=st.integers(1, 20000),
       proposed=st.integers(1, 20000), fired=st.integers(0, 20000), more_due=st.booleans())
def test_the_next_batch_stays_within_the_bounds(base, extra, current, proposed, fired, more_due):
    bounds = FireBatchBounds(base, base + extra)
    current = min(max(current, base), bounds.ceiling)
    got = next_fire_batch(bounds, current, min(proposed, bounds.ceiling), fired, more_due)
    assert bounds.base <= got <= bounds.ceiling
    if not more_due:
        assert got == bounds.base


@pytest.mark.parametrize("base, ceiling", [(0, 10), (10, 9)])
def test_bounds_out_of_order_are_refused(base, ceiling):
    with pytest.raises(ValueError):
        FireBatchBounds(base, ceiling)


def test_the_ceiling_is_a_setting_read_from_the_file_and_the_environment():
    assert Settings().timer_fire_batch_max == 4096
    assert parse_config(minimal(), env={}).settings.timer_fire_batch_max == 4096
    assert parse_config(with_settings({"timer_fire_batch_max": 1024}), env={}).settings.timer_fire_batch_max == 1024
    env = {"QUEEN_RAFT_TIMER_FIRE_BATCH_MAX": "2048"}
    assert parse_config(minimal(), env=env).settings.timer_fire_batch_max == 2048


@pytest.mark.parametrize("table, env", [
    ({"timer_fire_batch": 512, "timer_fire_batch_max": 256}, {}),
    ({"timer_fire_batch": 512}, {"QUEEN_RAFT_TIMER_FIRE_BATCH_MAX": "300"}),
])
def test_a_ceiling_named_below_the_base_batch_is_refused(table, env):
    with pytest.raises(ConfigError, match="timer_fire_batch_max must not be below timer_fire_batch"):
        parse_config(with_settings(table), env=env)


def test_a_ceiling_below_one_is_refused():
    with pytest.raises(ConfigError, match="timer_fire_batch_max must be >= 1"):
        parse_config(with_settings({"timer_fire_batch_max": 0}), env={})


def test_a_base_above_the_default_ceiling_keeps_its_batch():
    """A configuration that set a large timer_fire_batch before the ceiling existed still starts,
    and its batch does not grow past what it configured."""
    settings = parse_config(with_settings({"timer_fire_batch": 8192}), env={}).settings
    assert settings.timer_fire_batch_max == 8192
    bounds = RaftSettings.from_settings(settings).fire_batch_bounds
    assert (bounds.base, bounds.ceiling) == (8192, 8192)


def test_the_tick_gets_the_configured_bounds():
    settings = parse_config(with_settings({"timer_fire_batch": 64, "timer_fire_batch_max": 1000}), env={}).settings
    raft = RaftSettings.from_settings(settings)
    assert (raft.fire_batch_bounds.base, raft.fire_batch_bounds.ceiling) == (64, 1000)
    assert raft.tick_policy["fireBatch"] == 64
