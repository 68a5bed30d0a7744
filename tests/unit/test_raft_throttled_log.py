"""ThrottledLog: the first occurrence of a fault at once, then a line at most every interval with
the count of the occurrences left out; the end of an episode logs the next one at once."""

from __future__ import annotations

import logging

from queen_raft.raft.throttled_log import ThrottledLog


def test_an_episode_is_logged_at_its_start_then_once_an_interval_with_the_count(caplog):
    now = [100.0]
    throttled = ThrottledLog(logging.getLogger("throttled-test"), interval_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.ERROR, logger="throttled-test"):
        assert throttled.note(logging.ERROR, "disk says %s", "no") is True
        for _ in range(5):
            now[0] += 1.0
            assert throttled.note(logging.ERROR, "disk says %s", "no") is False
        now[0] += 60.0
        assert throttled.note(logging.ERROR, "disk says %s", "no") is True
        throttled.end_episode()
        assert throttled.note(logging.ERROR, "disk says %s", "yes") is True
    assert caplog.messages == ["disk says no", "disk says no (5 more since the last line)", "disk says yes"]
