"""Percentile summaries of samples (latencies, lags), the same way for us and for the peers."""

from __future__ import annotations

import math
from typing import Iterable


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an already sorted list (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(values: Iterable[float], digits: int = 2) -> dict:
    """{count, p50, p99, max, mean} of the samples."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "p50": None, "p99": None, "max": None, "mean": None}
    return {
        "count": len(ordered),
        "p50": round(percentile(ordered, 0.50), digits),
        "p99": round(percentile(ordered, 0.99), digits),
        "max": round(ordered[-1], digits),
        "mean": round(sum(ordered) / len(ordered), digits),
    }


def histogram_quantile(buckets: list[tuple[float, float]], fraction: float) -> float | None:
    """A quantile from Prometheus cumulative buckets [(le, count)], interpolated inside the bucket
    as Prometheus's histogram_quantile does (so it is only as exact as the bucket bounds)."""
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    target = fraction * total
    previous_le, previous_count = 0.0, 0.0
    for le, count in buckets:
        if count >= target:
            if math.isinf(le):
                return previous_le
            inside = count - previous_count
            share = 0.0 if inside == 0 else (target - previous_count) / inside
            return previous_le + (le - previous_le) * share
        previous_le, previous_count = le, count
    return previous_le
