"""LoopHistogram exports what prometheus_client's Histogram exports for the same observations."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from queen_raft.api.loop_histogram import LoopHistogram

BUCKETS = (0.001, 0.0025, 0.005, 1.0)
VALUES = [0.0, 0.001, 0.0010001, 0.0025, 0.003, 0.9, 1.0, 7.5, 1e9]


def exposition(collector_registry: CollectorRegistry) -> list[str]:
    """The exposition's lines, with each _created sample's value (a clock reading) left out."""
    lines = generate_latest(collector_registry).decode().splitlines()
    return [line.rsplit(" ", 1)[0] if "_created" in line else line for line in lines]


def test_a_labelled_histogram_exports_the_series_of_prometheus_client():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("h_seconds", "help text", ("route", "code"), buckets=BUCKETS)
    ours.register(loop)
    reference = Histogram("h_seconds", "help text", ["route", "code"], buckets=BUCKETS, registry=theirs)
    for index, value in enumerate(VALUES):
        route, code = ("/a", "200") if index % 3 else ("/b", "404")
        loop.labels(route, code).observe(value)
        reference.labels(route=route, code=code).observe(value)
    assert exposition(ours) == exposition(theirs)


def test_an_unlabelled_histogram_is_exported_before_its_first_observation():
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = LoopHistogram("c_seconds", "commit", buckets=BUCKETS)
    ours.register(loop)
    reference = Histogram("c_seconds", "commit", buckets=BUCKETS, registry=theirs)
    assert exposition(ours) == exposition(theirs)
    for value in VALUES:
        loop.observe(value)
        reference.observe(value)
    assert exposition(ours) == exposition(theirs)


def test_labels_must_match_the_label_names():
    with pytest.raises(ValueError):
        LoopHistogram("x", "x", ("route", "code")).labels("/a")
