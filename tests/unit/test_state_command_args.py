"""The fire policy a command carries: parsed alike whether or not an equal policy came before."""

import pytest

from queen_raft.state.command_args import parse_policy
from queen_raft.state.limits import DEFAULT_FIRE_POLICY
from queen_raft.state.refusal import Refusal


def test_an_equal_policy_parses_to_the_same_bounds_again():
    policy = {"fireBatch": 64, "fireMaxBytes": 1000}
    first = parse_policy(policy, "bad_request")
    assert first == DEFAULT_FIRE_POLICY._replace(fire_batch=64, fire_max_bytes=1000)
    assert parse_policy(dict(policy), "bad_request") == first


@pytest.mark.parametrize("bad", [
    {"fireBatch": True, "fireMaxBytes": 1000},  # True == 1 and hashes alike: still not an integer
    {"fireBatch": 1.0, "fireMaxBytes": 1000},
    {"fireBatch": 0, "fireMaxBytes": 1000},
    {"fireBatch": 1, "fireMaxBytes": 1000, "other": 1},
    {1: 1},
])
def test_a_bad_policy_is_refused_even_right_after_an_equal_looking_good_one(bad):
    parse_policy({"fireBatch": 1, "fireMaxBytes": 1000}, "bad_request")
    with pytest.raises(Refusal) as refused:
        parse_policy(bad, "bad_request")
    assert refused.value.code == "bad_request"


def test_the_refusal_names_the_key_and_its_range():
    with pytest.raises(Refusal, match=r"fireBatch must be an integer in 1\.\.1099511627776"):
        parse_policy({"fireBatch": True}, "bad_request")
    with pytest.raises(Refusal, match="unknown policy key 'nope'"):
        parse_policy({"nope": 1}, "timers_bad_request")
