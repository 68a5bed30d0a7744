"""The node hands the tick the same fire policy the schedule route sends.

A fire that fails inside its schedule entry and one that fails on a later tick must back off alike,
so the fire settings have to reach both commands.
"""

from queen_raft.config import parse_config
from queen_raft.raft.settings import RaftSettings

from tests.unit.test_config import minimal


def test_tick_policy_is_the_configured_fire_policy():
    env = {
        "QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": "3",
        "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MIN_MS": "250",
        "QUEEN_RAFT_TIMER_FIRE_BACKOFF_MAX_MS": "4000",
        "QUEEN_RAFT_TIMER_FIRE_TRANSIENT_BACKOFF_MS": "700",
        "QUEEN_RAFT_TIMER_FIRE_BATCH": "64",
    }
    settings = parse_config(minimal(), env=env).settings
    policy = RaftSettings.from_settings(settings).tick_policy
    assert policy == settings.fire_policy()
    assert policy["maxAttempts"] == 3 and policy["backoffMinMs"] == 250
    assert policy["backoffMaxMs"] == 4000 and policy["transientBackoffMs"] == 700
    assert policy["fireBatch"] == 64
