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
from .refusal import is_int, require


def clamp_limit(limit: int | None) -> int:
    if limit is None:
        return LIST_LIMIT_DEFAULT
    return max(LIST_LIMIT_MIN, min(LIST_LIMIT_MAX, limit))


def parse_policy(policy: object, code: str) -> FirePolicy:
    if policy is None:
        return DEFAULT_FIRE_POLICY
    require(isinstance(policy, dict), code, "policy must be an object")
    fields = {}
    for name, value in policy.items():
        require(name in POLICY_KEYS, code, f"unknown policy key {name!r}")
        field, minimum = POLICY_KEYS[name]
        require(is_int(value) and minimum <= value <= MAX_POLICY_VALUE, code,
                f"{name} must be an integer in {minimum}..{MAX_POLICY_VALUE}")
        fields[field] = value
    return DEFAULT_FIRE_POLICY._replace(**fields)


def group_name(value: object) -> str:
    require(value is None or isinstance(value, str), "bad_request", "consumerGroup must be a string")
    return QUEUE_MODE_GROUP if value is None else value
