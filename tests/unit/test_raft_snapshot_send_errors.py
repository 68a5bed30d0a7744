"""A leader that cannot read its snapshot file to send it to a follower (missing, EIO, EACCES)
treats it as a damaged one: it logs once, sends nothing pysyncobj cannot take, and writes a new
snapshot from its state in memory (snapshot_repair.py). pysyncobj asks for the next chunk at every
heartbeat for as long as the follower lags, so each of those errors came back every heartbeat: a
traceback logged each time, and a read error answered `False`, which pysyncobj indexes as a chunk
(a TypeError out of the leader's tick, and out of the follower's once sent)."""

from __future__ import annotations

import errno
import logging
import os

import pytest

import queen_raft.raft.snapshot_writer as snapshot_writer
from queen_raft.raft.snapshot_file import HEADER, encode_snapshot
from queen_raft.raft.snapshot_writer import SnapshotSerializer

HEARTBEATS = 20


def dump() -> tuple:
    entries = [(b"\x00" + bytes([i]), i, 1) for i in range(1, 4)]
    return (b"state" + os.urandom(20_000), entries[1], entries[2], None)


def chunks_asked(serializer: SnapshotSerializer) -> list:
    return [serializer.getTransmissionData("follower") for _ in range(HEARTBEATS)]


def assert_logged_once_without_traceback(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is None and "does not verify" not in errors[0].getMessage()


def test_a_missing_snapshot_is_not_sent_and_is_written_anew_logged_once(tmp_path, caplog):
    path = tmp_path / "raft.snapshot"
    serializer = SnapshotSerializer(str(path), 4096)  # no file: deleted, or lost with its disk
    with caplog.at_level(logging.WARNING):
        assert chunks_asked(serializer) == [None] * HEARTBEATS
    assert serializer.rewrite_wanted
    assert_logged_once_without_traceback(caplog)


class ReadFailsAfterTheHeader:
    """A snapshot file whose payload reads fail (EIO: a bad sector), its header still readable."""

    def __init__(self, file) -> None:
        self._file = file

    def read(self, size: int = -1) -> bytes:
        if self._file.tell() >= HEADER.size:
            raise OSError(errno.EIO, "Input/output error")
        return self._file.read(min(size, HEADER.size - self._file.tell()))

    def __getattr__(self, name):
        return getattr(self._file, name)


def test_a_snapshot_that_fails_to_read_is_never_answered_as_false_and_is_written_anew(tmp_path, monkeypatch, caplog):
    path = tmp_path / "raft.snapshot"
    path.write_bytes(encode_snapshot(dump()))
    serializer = SnapshotSerializer(str(path), 4096)
    monkeypatch.setattr(snapshot_writer, "open", lambda *a, **k: ReadFailsAfterTheHeader(open(*a, **k)), raising=False)
    with caplog.at_level(logging.WARNING):
        answers = chunks_asked(serializer)
    # The header went out as the first chunk; then nothing but None, which pysyncobj skips.
    assert answers[0] is not None and answers[0][1] is True
    assert all(answer is None for answer in answers[1:])
    assert serializer.rewrite_wanted
    assert_logged_once_without_traceback(caplog)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO])
def test_a_snapshot_that_fails_to_open_is_not_sent_and_is_written_anew(tmp_path, monkeypatch, caplog, code):
    path = tmp_path / "raft.snapshot"
    path.write_bytes(encode_snapshot(dump()))
    serializer = SnapshotSerializer(str(path), 4096)

    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(snapshot_writer, "open", refuse, raising=False)
    with caplog.at_level(logging.WARNING):
        assert chunks_asked(serializer) == [None] * HEARTBEATS
    assert serializer.rewrite_wanted
    assert_logged_once_without_traceback(caplog)
