"""Whether a client's value can be stored: it must round-trip through a log entry, a snapshot and
an answer. Pure functions of the value (no clock, no I/O), so every replica refuses the same.
"""

from __future__ import annotations

import msgpack

from .limits import MAX_KV_VALUE_BYTES, MAX_JSON_DEPTH


def nesting_depth(value: object, limit: int | None = None) -> int:
    """Container levels of a JSON-like value: a scalar is 0, [] is 1, [[1]] is 2. Walked with a
    stack, never recursion, so a hostile depth costs time linear in its size and no RecursionError.
    With `limit`, the walk stops at the first container deeper than it (the answer is then limit + 1)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is list:
            children = item
        elif type(item) is dict:
            children = item.values()
        else:
            continue
        if depth > deepest:
            deepest = depth
            if limit is not None and depth > limit:
                return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def kv_value_problem(value: object) -> str | None:
    """Why `value` cannot be stored as a KV value, or None when it can."""
    if nesting_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return f"the value nests deeper than {MAX_JSON_DEPTH} levels"
    try:
        size = len(msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError):  # UnicodeEncodeError (a lone surrogate) is a ValueError
        return "the value holds something that cannot be stored (an integer past 64 bits or a lone surrogate)"
    if size > MAX_KV_VALUE_BYTES:
        return f"the value is {size} bytes stored, over the bound of {MAX_KV_VALUE_BYTES}"
    return None
