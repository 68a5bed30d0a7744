"""Young garbage collections paced by time, so that none of them walks more than a bounded amount.

CPython starts a young (gen0) collection once `threshold0` containers more have been created than
freed, whatever their sizes, and a gen1 collection every `threshold1` young ones. A node's sorted
indexes (the due index, each queue's keys: SortedLists) keep their values in sublists of up to
2,000 references, and a schedule that overflows a sublist splits it into new, young lists. Under a
bulk load nearly every container that outlives its request is such a sublist, so the young
generation filled with thousands of them before its count reached the node's threshold (10,000,
node.GC_THRESHOLDS): one young collection then read millions of references, and with three
million timers pending it held the GIL 150-220 ms (ticks, commits and answers all waited; the fire
lag's p99 was those pauses). A gen1 collection walks ten young generations' worth.

The node therefore also collects on a clock: every PERIOD_S, once at least MIN_YOUNG containers
wait, gen0 (or gen0 and gen1, when `threshold1` young collections have run since the last gen1
one, as CPython would). A young collection then holds what a PERIOD_S of applies created (at
30,000 timers a second loaded, about 3,000 references of new sublists, well under a millisecond),
and a gen1 one ten times that. The automatic collections stay as they are, for a burst that
outruns the clock; they find little left to walk. Full (gen2) collections keep CPython's rules
and the node's threshold (node.py). Below MIN_YOUNG nothing runs, so an idle node pays nothing.
"""

from __future__ import annotations

import asyncio
import gc

PERIOD_S = 0.05
# Below this many young containers a collection would walk at most MIN_YOUNG sublists (100,000
# references, ~3 ms at three million pending): not worth a wake-up of its own.
MIN_YOUNG = 50


def collect_young(min_young: int = MIN_YOUNG) -> int | None:
    """One paced step: the generation collected (0 or 1), or None when too little waits."""
    young, collections_since_gen1, _ = gc.get_count()
    if collections_since_gen1 >= gc.get_threshold()[1]:
        gc.collect(1)
        return 1
    if young >= min_young:
        gc.collect(0)
        return 0
    return None


class YoungCollections:
    """`start(loop)` runs collect_young every PERIOD_S on the loop until `stop()`."""

    def __init__(self, period_s: float = PERIOD_S, min_young: int = MIN_YOUNG) -> None:
        self.period_s = period_s
        self.min_young = min_young
        self.collections = [0, 0]  # gen0, gen1 collections run by this pacer
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handle = loop.call_later(self.period_s, self._step)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _step(self) -> None:
        generation = collect_young(self.min_young)
        if generation is not None:
            self.collections[generation] += 1
        if self._handle is not None and self._loop is not None:
            self._handle = self._loop.call_later(self.period_s, self._step)
