"""What an operator reads of a member's term and vote stores (stored_term.TermStoreFaults): a failed
store sets `failing` with the time of the episode's first failure and the last error, the first
store that succeeds clears it, and the log says each once rather than at every refused message."""

from __future__ import annotations

import logging

from queen_raft.raft.stored_term import TermNotStored, TermStoreFaults


class FakeWallClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_an_episode_keeps_its_first_time_and_its_last_error_and_counts_every_failure():
    clock = FakeWallClock()
    faults = TermStoreFaults(wall_clock=clock)
    assert faults.status() == {"failed": 0, "failing": False, "failingSinceMs": None, "lastError": None}
    faults.note_failure(TermNotStored("term 5, vote None: [Errno 13] Permission denied"))
    clock.now += 2.5
    faults.note_failure(TermNotStored("term 6, vote None: [Errno 5] Input/output error"))
    assert faults.status() == {"failed": 2, "failing": True, "failingSinceMs": 1_700_000_000_000,
                               "lastError": "term 6, vote None: [Errno 5] Input/output error"}


def test_the_first_store_that_succeeds_clears_the_flag_and_a_new_failure_starts_a_new_episode():
    clock = FakeWallClock()
    faults = TermStoreFaults(wall_clock=clock)
    faults.note_failure(TermNotStored("term 5, vote None: [Errno 13] Permission denied"))
    faults.note_stored(5)
    assert faults.status() == {"failed": 1, "failing": False, "failingSinceMs": None, "lastError": None}
    clock.now += 60.0
    faults.note_failure(TermNotStored("term 8, vote None: [Errno 30] Read-only file system"))
    assert faults.status()["failingSinceMs"] == 1_700_000_060_000 and faults.status()["failed"] == 2


def test_the_log_says_the_start_and_the_end_of_an_episode_once(caplog):
    faults = TermStoreFaults(wall_clock=FakeWallClock())
    caplog.set_level(logging.INFO, logger="queen_raft.raft.stored_term")
    faults.note_stored(4)  # a store with no failure before it: nothing to say
    for _ in range(20):  # a leader's heartbeats of one second, each refused
        faults.note_failure(TermNotStored("term 5, vote None: [Errno 13] Permission denied"))
    faults.note_stored(5)
    faults.note_stored(5)
    faults.note_failure(TermNotStored("term 6, vote None: [Errno 13] Permission denied"))  # a new episode, at once
    lines = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert [level for level, _ in lines] == [logging.ERROR, logging.WARNING, logging.ERROR], lines
    assert "cannot store the Raft term or vote (term 5" in lines[0][1]
    assert "stored again (term 5)" in lines[1][1]
    assert "cannot store the Raft term or vote (term 6" in lines[2][1]
