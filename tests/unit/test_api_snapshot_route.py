"""The backup read's snapshot: encoded by a forked child, so the state's lock (which the Raft tick
thread needs for every apply) is held only for the fork, not for the encode."""

from __future__ import annotations

import threading
import time

import pytest

from queen_raft.api.snapshot_route import SnapshotFailed, _take_snapshot
from queen_raft.raft.forked_writer import OOM_SCORE_ADJ

ENCODE_S = 1.0


class SlowState:
    def snapshot(self) -> bytes:
        time.sleep(ENCODE_S)
        return b"state bytes"


class BrokenState:
    def snapshot(self) -> bytes:
        raise ValueError("cannot encode")


class LockedGroup:
    def __init__(self, state) -> None:
        self.lock, self.state = threading.Lock(), state
        self.entered = threading.Event()

    def status(self) -> dict:
        return {"appliedIndex": 42}

    def peek_local(self, fn):
        with self.lock:
            self.entered.set()
            return fn(self.state)


def test_the_lock_is_free_while_the_child_encodes():
    group, taken = LockedGroup(SlowState()), {}
    worker = threading.Thread(target=lambda: taken.update(result=_take_snapshot(group)))
    started = time.monotonic()
    worker.start()
    assert group.entered.wait(5), "the snapshot never took the lock"
    assert group.lock.acquire(timeout=ENCODE_S / 2), "an apply would wait for the whole encode"
    acquired_after = time.monotonic() - started
    group.lock.release()
    worker.join(timeout=10)
    output, applied_index = taken["result"]
    with output:
        assert output.read() == b"state bytes"
    assert applied_index == 42
    assert acquired_after < ENCODE_S / 2


def test_an_encoder_that_fails_is_an_error_not_an_empty_snapshot():
    with pytest.raises(SnapshotFailed, match="wait status"):
        _take_snapshot(LockedGroup(BrokenState()))


class ScoreReportingState:
    """Encodes the OOM score the encoding process has."""

    def snapshot(self) -> bytes:
        with open("/proc/self/oom_score_adj", "rb") as file:
            return file.read().strip()


def test_the_encoder_is_the_oom_killers_first_choice_and_its_node_is_not():
    node_score = open("/proc/self/oom_score_adj", "rb").read().strip()
    output, _ = _take_snapshot(LockedGroup(ScoreReportingState()))
    with output:
        assert output.read() == str(OOM_SCORE_ADJ).encode()
    assert open("/proc/self/oom_score_adj", "rb").read().strip() == node_score
