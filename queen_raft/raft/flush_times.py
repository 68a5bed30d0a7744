"""How long the journal's fdatasync takes: per-bucket counts and a sum, observed by the tick thread
on each flush and read at scrape time (queen_raft_journal_flush_seconds, api/metrics.py).

A flush is what every acknowledged write waits for in `group` fsync mode, so its tail is the first
thing to look at when commits slow down: a disk that takes 50 ms to flush makes every commit
take at least that long.
"""

from __future__ import annotations

import bisect
import threading

# From a page-cache flush on a fast SSD (~0.1 ms) to a disk in trouble (seconds).
FLUSH_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class FlushTimes:
    def __init__(self, bounds_s: tuple[float, ...] = FLUSH_BUCKETS_S) -> None:
        self.bounds_s = bounds_s
        self._counts = [0] * (len(bounds_s) + 1)  # the last: past the largest bound
        self._sum_s = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds_s, seconds)] += 1
            self._sum_s += seconds

    def snapshot(self) -> dict:
        """{boundsSeconds, bucketCounts (per bucket, not cumulative), sumSeconds}."""
        with self._lock:
            return {"boundsSeconds": list(self.bounds_s), "bucketCounts": list(self._counts), "sumSeconds": self._sum_s}
