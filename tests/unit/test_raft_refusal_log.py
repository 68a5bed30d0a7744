"""What the Raft ports refuse is logged as counts, at most once per interval."""

from __future__ import annotations

import logging

from queen_raft.raft.transport import RefusalLog


def test_refusals_are_logged_as_counts_at_most_once_per_interval(caplog):
    refusals = RefusalLog("Raft port 127.0.0.1:7400 refused connections", interval_s=60.0)
    with caplog.at_level(logging.WARNING, logger="queen_raft.raft.transport"):
        refusals.report({"handshakes refused": 0, "handshakes timed out": 0}, now=0.0)
        assert caplog.records == []  # nothing refused: nothing said
        refusals.report({"handshakes refused": 5, "handshakes timed out": 0}, now=30.0)
        assert caplog.records == []  # within the interval: counted, not logged yet
        refusals.report({"handshakes refused": 7, "handshakes timed out": 300}, now=61.0)
        refusals.report({"handshakes refused": 9, "handshakes timed out": 300}, now=62.0)
        refusals.report({"handshakes refused": 9, "handshakes timed out": 301}, now=122.0)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "Raft port 127.0.0.1:7400 refused connections, since the last report: 7 handshakes refused, 300 handshakes timed out",
        "Raft port 127.0.0.1:7400 refused connections, since the last report: 2 handshakes refused, 1 handshakes timed out",
    ]
