"""A Wing-Gong-Lowe linearizability search for one key's history (as in porcupine and Knossos).

The history splits by timer key (P-compositionality), so each search is small. An operation is a
call/return interval; an `info` operation has no return (it may take effect at any instant after
its call, or never), so it never forces the search to linearize it. The search keeps a cache of
(set of linearized operations, model state) pairs it has already explored, which is what makes it
practical.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

INVALID = object()  # a model step that cannot produce the observed answer
NEVER_RETURNS = float("inf")

# Configurations the search may visit for one key before it gives up and answers "unknown" (a
# verdict, not a pass). Histories here have tens of operations per key; a real search visits a few
# thousand; a budget this size ends a pathological one in seconds.
DEFAULT_SEARCH_BUDGET = 2_000_000


@dataclass
class KeyOperation:
    """One operation on the key: `call` and `ret` are monotonic times; ret None = never returned."""

    id: int
    call: float
    ret: float | None
    kind: str
    args: dict = field(default_factory=dict)
    ref: Any = None  # what to show in a counterexample (the history operation's summary)


@dataclass
class SearchResult:
    linearizable: bool | None  # None: budget exhausted, unknown
    explored: int
    # On failure: the longest prefix the search managed to linearize, and the operation that
    # could not be placed before its return (Knossos calls these the "final paths").
    longest_prefix: list[int] = field(default_factory=list)
    stuck_on: int | None = None
    state_at_stuck: Any = None


@dataclass
class _Entry:
    time: float
    is_call: bool
    op_id: int
    prev: "_Entry | None" = None
    next: "_Entry | None" = None
    match: "_Entry | None" = None  # call -> its return entry


def check_key(
    operations: Sequence[KeyOperation],
    initial_state: Hashable,
    step: Callable[[Hashable, KeyOperation], Any],
    budget: int = DEFAULT_SEARCH_BUDGET,
) -> SearchResult:
    """Is there a total order of the operations, consistent with real time, that the model accepts?

    `step(state, op)` returns the next state, or INVALID when the op's answer is impossible in
    `state`. Operations whose `ret` is None may be left out of the order (they possibly never
    happened); all others must be in it.
    """
    if not operations:
        return SearchResult(True, 0)
    by_id = {op.id: op for op in operations}
    if len(by_id) != len(operations):
        raise ValueError("operation ids must be unique")
    entries: list[_Entry] = []
    for op in operations:
        call = _Entry(op.call, True, op.id)
        ret = _Entry(NEVER_RETURNS if op.ret is None else op.ret, False, op.id)
        if op.ret is not None and op.ret < op.call:
            raise ValueError(f"operation {op.id} returns before its call")
        call.match = ret
        entries += [call, ret]
    # Calls sort before returns at the same instant: two operations that touch are concurrent.
    entries.sort(key=lambda e: (e.time, 0 if e.is_call else 1, e.op_id))
    head = _Entry(float("-inf"), True, -1)
    previous = head
    for entry in entries:
        previous.next = entry
        entry.prev = previous
        previous = entry

    def lift(call: _Entry) -> None:
        call.prev.next = call.next
        if call.next is not None:
            call.next.prev = call.prev
        ret = call.match
        ret.prev.next = ret.next
        if ret.next is not None:
            ret.next.prev = ret.prev

    def unlift(call: _Entry) -> None:
        ret = call.match
        ret.prev.next = ret
        if ret.next is not None:
            ret.next.prev = ret
        call.prev.next = call
        if call.next is not None:
            call.next.prev = call

    bit = {op.id: 1 << position for position, op in enumerate(operations)}
    state: Hashable = initial_state
    linearized = 0
    cache: set[tuple[int, Hashable]] = set()
    stack: list[tuple[_Entry, Hashable]] = []
    explored = 0
    best_prefix: list[int] = []
    stuck_on: int | None = None
    state_at_stuck: Any = None
    entry = head.next
    while True:
        if entry is None or (not entry.is_call and entry.time == NEVER_RETURNS):
            # Every operation that returned is placed; what is left may never have happened.
            return SearchResult(True, explored)
        explored += 1
        if explored > budget:
            return SearchResult(None, explored, [e.op_id for e, _ in stack])
        if entry.is_call:
            op = by_id[entry.op_id]
            next_state = step(state, op)
            if next_state is not INVALID:
                key = (linearized | bit[op.id], next_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = next_state
                    linearized |= bit[op.id]
                    lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # A return whose call was never placed: undo the last placement and try the next candidate.
        if len(stack) >= len(best_prefix):
            best_prefix = [e.op_id for e, _ in stack]
            stuck_on = entry.op_id
            state_at_stuck = state
        if not stack:
            return SearchResult(False, explored, best_prefix, stuck_on, state_at_stuck)
        call, state = stack.pop()
        linearized &= ~bit[call.op_id]
        unlift(call)
        entry = call.next
