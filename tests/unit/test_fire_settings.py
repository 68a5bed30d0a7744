"""The fire policy has one name in the configuration (`timer_fire_*`), and RaftSettings is derived
from Settings: the tick proposes exactly the policy the routes send.

The `sweeper_*` keys and `QUEEN_SWEEPER_*` variables of earlier configurations stay accepted as
aliases; naming one setting twice (old and new name) is refused, since the two could disagree.
"""

import pytest

from queen_raft.config import ConfigError, Settings, parse_config
from queen_raft.raft.settings import SETTINGS_FIELDS, RaftSettings

from tests.unit.test_config import minimal

FIRE_KEYS = {
    "timer_fire_max_attempts": ("sweeper_max_attempts", "QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS", "QUEEN_SWEEPER_MAX_ATTEMPTS", 3),
    "timer_fire_backoff_min_ms": ("sweeper_backoff_min_ms", "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MIN_MS", "QUEEN_SWEEPER_BACKOFF_MIN_MS", 250),
    "timer_fire_backoff_max_ms": ("sweeper_backoff_max_ms", "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MAX_MS", "QUEEN_SWEEPER_BACKOFF_MAX_MS", 4000),
    "timer_fire_transient_backoff_ms": ("sweeper_transient_backoff_ms", "QUEEN_RAFT_TIMER_FIRE_TRANSIENT_BACKOFF_MS",
                                        "QUEEN_SWEEPER_TRANSIENT_BACKOFF_MS", 700),
}


def with_settings(table: dict) -> dict:
    raw = minimal()
    raw["settings"] = table
    return raw


@pytest.mark.parametrize("key", sorted(FIRE_KEYS))
def test_each_fire_setting_is_read_under_its_name_and_its_old_name(key):
    old_key, env, old_env, value = FIRE_KEYS[key]
    for settings in (
        parse_config(with_settings({key: value}), env={}).settings,
        parse_config(with_settings({old_key: value}), env={}).settings,
        parse_config(minimal(), env={env: str(value)}).settings,
        parse_config(minimal(), env={old_env: str(value)}).settings,
    ):
        assert getattr(settings, key) == value


@pytest.mark.parametrize("key", sorted(FIRE_KEYS))
def test_a_fire_setting_named_twice_is_refused(key):
    old_key, env, old_env, value = FIRE_KEYS[key]
    with pytest.raises(ConfigError, match=f"{key}.*{old_key}|{old_key}.*{key}"):
        parse_config(with_settings({key: value, old_key: value}), env={})
    with pytest.raises(ConfigError, match=f"{env}.*{old_env}|{old_env}.*{env}"):
        parse_config(minimal(), env={env: str(value), old_env: str(value)})


def test_the_old_name_is_checked_like_the_new_one():
    with pytest.raises(ConfigError, match="sweeper_max_attempts must be >= 1"):
        parse_config(with_settings({"sweeper_max_attempts": 0}), env={})
    with pytest.raises(ConfigError, match="timer_fire_backoff_min_ms must not exceed timer_fire_backoff_max_ms"):
        parse_config(with_settings({"sweeper_backoff_min_ms": 5000, "timer_fire_backoff_max_ms": 10}), env={})


def test_raft_settings_are_derived_from_the_settings():
    env = {"QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": "3", "QUEEN_RAFT_TIMER_FIRE_BATCH": "64",
           "QUEEN_RAFT_TIMER_TICK_MS": "20", "QUEEN_RAFT_COMMIT_TIMEOUT_MS": "900", "QUEEN_RAFT_PASSWORD": "pw"}
    settings = parse_config(minimal(), env=env).settings
    raft = RaftSettings.from_settings(settings)
    assert raft.tick_policy == settings.fire_policy()
    assert raft.tick_policy["maxAttempts"] == 3 and raft.tick_policy["fireBatch"] == 64
    assert (raft.tick_ms, raft.commit_timeout_ms, raft.password) == (20, 900, "pw")
    for raft_field, settings_field in SETTINGS_FIELDS.items():
        assert getattr(raft, raft_field) == getattr(settings, settings_field)


def test_raft_defaults_are_the_settings_defaults():
    assert RaftSettings() == RaftSettings.from_settings(Settings())
    assert hash(RaftSettings()) == hash(RaftSettings.from_settings(Settings()))
    assert RaftSettings() != RaftSettings(fire_policy=Settings(timer_fire_batch=7).fire_policy())
    assert RaftSettings().tick_policy == Settings().fire_policy()


def test_every_raft_setting_but_the_policy_comes_from_one_setting():
    from dataclasses import fields
    assert {f.name for f in fields(RaftSettings)} == set(SETTINGS_FIELDS) | {"fire_policy"}
    assert set(SETTINGS_FIELDS.values()) <= {f.name for f in fields(Settings)}
