"""A Prometheus histogram observed from the loop thread only, for the meters every call feeds.

prometheus_client's Histogram.observe takes one lock for the sum and another for the bucket, and
walks the bucket bounds in Python until the value fits; the request and commit meters are observed
once each on every call. Here an observation is one bisect and two additions without a lock: only
the loop thread observes (one writer, so no update is lost), and a scrape, from any thread, copies
the counts. The series are those prometheus_client's Histogram exports: `_bucket` (cumulative, by
`le`), `_count`, `_sum` and `_created`.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from typing import Iterable

from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class HistogramSeries:
    """One label set's counts: `observe(value)` on the loop thread."""

    __slots__ = ("_bounds", "counts", "sum", "created")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative; the last is past every bound
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        # Histogram.observe's rule: the first bucket whose bound is >= the value.
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value


class LoopHistogram(Collector):
    """`labels(*values)` gives a label set's HistogramSeries (created at its first use, as
    prometheus_client's labels() does); without label names, `observe` counts in the one series,
    exported from the start."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = ()) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = labelnames
        self._bounds = (*buckets, math.inf)
        self._bound_labels = [floatToGoString(bound) for bound in self._bounds]
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        if not labelnames:
            self.observe = self.labels().observe

    def labels(self, *values: str) -> HistogramSeries:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self._name} takes the labels {self._labelnames}, got {values}")
        series = self._series.get(values)
        if series is None:
            series = self._series[values] = HistogramSeries(self._bounds)
        return series

    def collect(self) -> Iterable[Metric]:
        metric = Metric(self._name, self._documentation, "histogram")
        name = self._name
        for values, series in list(self._series.items()):
            labels = dict(zip(self._labelnames, values))
            counts, total, created = list(series.counts), series.sum, series.created
            cumulative = 0
            for bound_label, count in zip(self._bound_labels, counts):
                cumulative += count
                metric.add_sample(name + "_bucket", {**labels, "le": bound_label}, float(cumulative))
            metric.add_sample(name + "_count", labels, float(cumulative))
            metric.add_sample(name + "_sum", labels, total)
            metric.add_sample(name + "_created", labels, created)
        return [metric]
