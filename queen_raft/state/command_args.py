"""Arguments shared by several commands, checked the same way wherever they appear."""

from __future__ import annotations

from .limits import (
    DEFAULT_FIRE_POLICY,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    LIST_LIMIT_MIN,
    MAX_POLICY_VALUE,
    POLICY_KEYS,
    QUEUE_MODE_GROUP,
    FirePolicy,
)
from .refusal import Refusal, is_int, require


def clamp_limit(limit: int | None) -> int:
    if limit is None:
        return LIST_LIMIT_DEFAULT
    return max(LIST_LIMIT_MIN, min(LIST_LIMIT_MAX, limit))


def parse_policy(policy: object, code: str) -> FirePolicy:
    if policy is None:
        return DEFAULT_FIRE_POLICY
    require(isinstance(policy, dict), code, "policy must be an object")
    # Every command of a node carries the same policy: the FirePolicy of the last one parsed is
    # kept with its exact items (types included, since True == 1) and given to an equal policy.
    items = tuple(policy.items())
    key = (items, tuple(map(type, policy.values())))
    if key == _last_policy[0]:
        return _last_policy[1]
    fields = {}
    for name, value in items:
        spec = POLICY_KEYS.get(name) if type(name) is str else None
        if spec is None:
            raise Refusal(code, f"unknown policy key {name!r}")
        field, minimum = spec
        if not (is_int(value) and minimum <= value <= MAX_POLICY_VALUE):
            raise Refusal(code, f"{name} must be an integer in {minimum}..{MAX_POLICY_VALUE}")
        fields[field] = value
    parsed = DEFAULT_FIRE_POLICY._replace(**fields)
    _last_policy[:] = [key, parsed]
    return parsed


# [the key of the policy parsed last, its FirePolicy]: a pure function's last answer, the same on
# every replica whatever it holds.
_last_policy: list = [None, DEFAULT_FIRE_POLICY]


def group_name(value: object) -> str:
    require(value is None or isinstance(value, str), "bad_request", "consumerGroup must be a string")
    return QUEUE_MODE_GROUP if value is None else value
