"""Bulk changes of a SortedList, one call per entry instead of one per timer (fire and schedule).

A tick removes up to a fire batch of timers from the due index (always a prefix) and their keys
from each queue's key index (scattered, but known in order). SortedList removes one value per
call, each a Python frame that walks its positional index and shifts a sublist; at a few thousand
fires per entry on every replica that was a third of the fire cost. A `timers` entry adds up to
its op count of timers and keys, sorted first, in one pass (`insert_sorted`).

These functions work on sortedcontainers' internals (`_lists`, `_maxes`, `_index`, `_len`, `_load`,
`_expand`; stable since 2.0, the version range is pinned in pyproject.toml) and leave its
invariants as SortedList's own methods would: the sublists sorted and ordered, `_maxes` the last
value of each, every sublist but the last at least half the load and at most twice it, and the
positional index dropped (SortedList rebuilds it on the next positional access; the fire and
schedule paths make none). They look only at the sublists they change, so their cost does not
grow with the number of pending timers. tests/unit/test_state_sorted_bulk.py checks them with `SortedList._check()`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from itertools import filterfalse
from sortedcontainers import SortedList


# remove_sorted filters a sublist's span in one pass when the values to remove are at least one in
# this many of its elements (a set lookup per element costs a fraction of a bisect and a delete).
FILTER_SPAN_PER_VALUE = 8


def drop_first(entries: SortedList, count: int) -> None:
    """`del entries[:count]`: whole sublists dropped, the first one sliced."""
    if count <= 0:
        return
    if count >= len(entries):
        entries.clear()
        return
    lists, maxes = entries._lists, entries._maxes
    remaining = count
    while remaining >= len(lists[0]):
        remaining -= len(lists[0])
        del lists[0]
        del maxes[0]
    if remaining:
        del lists[0][:remaining]
    entries._len -= count
    # Only the first sublist changed (whole sublists before it went).
    _merge_short(entries, [0])


def remove_sorted(entries: SortedList, values: list) -> None:
    """Remove `values`: each present in `entries` exactly once, given in ascending order.

    A sublist at a time: the values that fall in it are found with one bisect of `values`, and
    when they sit side by side there (the usual case: a tick fires a run of keys) they go in one
    slice delete; otherwise one at a time, from the highest, so the positions stay valid.
    """
    lists, maxes = entries._lists, entries._maxes
    touched: list[int] = []  # positions of the sublists changed, ascending
    pos = 0
    first = 0
    while first < len(values):
        # Sublists are visited in ascending order and `maxes` is updated only at the end, so
        # every bisect here sees the original maxima.
        pos = bisect_left(maxes, values[first], pos)
        sublist = lists[pos]
        end = bisect_right(values, maxes[pos], first)
        start = bisect_left(sublist, values[first])
        count = end - first
        if sublist[start + count - 1] == values[end - 1]:
            del sublist[start:start + count]
        else:
            stop = bisect_right(sublist, values[end - 1], start)
            if stop - start <= count * FILTER_SPAN_PER_VALUE:
                # Dense: one pass over the span in C beats a bisect and a delete per value.
                gone = set(values[first:end])
                sublist[start:stop] = list(filterfalse(gone.__contains__, sublist[start:stop]))
            else:
                for index in range(end - 1, first - 1, -1):
                    del sublist[bisect_left(sublist, values[index], start)]
        touched.append(pos)
        first = end
    emptied: list[int] = []
    kept: list[int] = []  # positions of the changed sublists that stay, after the empty ones go
    for pos in touched:
        if lists[pos]:
            kept.append(pos - len(emptied))
        else:
            emptied.append(pos)
    for pos in reversed(emptied):
        del lists[pos]
        del maxes[pos]
    for pos in kept:
        maxes[pos] = lists[pos][-1]
    entries._len -= len(values)
    _merge_short(entries, kept)


def _merge_short(entries: SortedList, changed: list[int]) -> None:
    """Merge each sublist at `changed` (ascending positions; the only sublists that shrank) that
    fell under half the load, but the last, into its successor (splitting the result when over
    twice the load), and drop the positional index.

    Only the changed sublists are looked at, never all of them: a fire's cost must not grow with
    the number of pending timers. From the highest position down, so a merge (or the split after
    it) moves only positions already done. A successor that was not changed holds at least half
    the load, and one that was changed has been merged already, so one merge suffices.
    """
    del entries._index[:]
    lists, maxes = entries._lists, entries._maxes
    half = entries._load >> 1
    for pos in reversed(changed):
        if pos >= len(lists) - 1 or len(lists[pos]) >= half:
            continue
        lists[pos].extend(lists[pos + 1])
        del lists[pos + 1]
        del maxes[pos]  # the merged sublist ends where its successor ended
        entries._expand(pos)  # splits it in two when over twice the load; the index is empty


def insert_sorted(entries: SortedList, values: list) -> None:
    """Add `values`: none of them present in `entries` (nor twice), given in ascending order.

    A run (no present value between the first and the last of `values`: a schedule batch's keys
    under one fresh prefix, its due instants past the end of the due index) goes in with one
    slice assignment, an order of magnitude faster than value by value. The guard costs two bisects
    per call, so scattered values take the value-by-value path at no noticeable extra cost.
    """
    if len(values) < 2:
        if values:  # one value (a single-op schedule): SortedList's own add costs less than the guard
            entries.add(values[0])
        return
    lists, maxes = entries._lists, entries._maxes
    if not lists:
        entries.update(values)
        return
    last = len(lists) - 1
    first_pos = bisect_right(maxes, values[0])
    if first_pos == bisect_right(maxes, values[-1], first_pos):
        # Every sublist maximum is below all of `values` or above all of them.
        if first_pos > last:
            lists[last].extend(values)
            maxes[last] = values[-1]
            _split_oversized(entries, [last], len(values))
            return
        sublist = lists[first_pos]
        start = bisect_left(sublist, values[0])  # < len(sublist): values[0] < maxes[first_pos]
        if sublist[start] > values[-1]:
            sublist[start:start] = values
            _split_oversized(entries, [first_pos], len(values))
            return
    touched: list[int] = []  # positions of the sublists changed, ascending
    pos = 0
    for value in values:
        # Inserting below a sublist's maximum leaves `maxes` as it was; only the last sublist's
        # maximum moves (kept up to date here), so the search stays exact.
        pos = bisect_right(maxes, value, pos)
        if pos > last:
            pos = last
            lists[pos].append(value)
            maxes[pos] = value
        else:
            insort(lists[pos], value)
        if not touched or touched[-1] != pos:
            touched.append(pos)
    _split_oversized(entries, touched, len(values))


def _split_oversized(entries: SortedList, touched: list[int], added: int) -> None:
    """After `added` values went into the sublists at `touched` (ascending positions): count
    them, cut each of those sublists over twice the load into chunks of the load, and drop the
    positional index.

    Adding only lengthens sublists, so only the last chunk of a cut can be under half the load:
    those alone are merged (`_merge_short`), never a scan of every sublist."""
    lists, maxes, load = entries._lists, entries._maxes, entries._load
    entries._len += added
    last_chunks: list[int] = []  # positions of each cut's last chunk, the only short sublists
    for pos in reversed(touched):
        sublist = lists[pos]
        if len(sublist) > load << 1:
            chunks = [sublist[start:start + load] for start in range(0, len(sublist), load)]
            lists[pos:pos + 1] = chunks
            maxes[pos:pos + 1] = [chunk[-1] for chunk in chunks]
            # The cuts already made are above this one: they moved up by the chunks added here.
            last_chunks = [later + len(chunks) - 1 for later in last_chunks]
            last_chunks.append(pos + len(chunks) - 1)
    if last_chunks:
        last_chunks.reverse()
        _merge_short(entries, last_chunks)
    else:
        del entries._index[:]
