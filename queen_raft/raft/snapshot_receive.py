"""A follower's side of a snapshot transfer: the leader's chunks written to their own tmp file,
fsynced and verified before the file replaces the local snapshot (snapshot_writer.py, rule 5).

A disk that cannot take the file (full, read-only) fails every transfer, and the leader starts the
transfer again for as long as this node lags: several times a second for a small state. So a failed
write is logged when the episode starts, then at most once a minute with the count since the last
line (throttled_log.py); an installed snapshot ends the episode.
"""

from __future__ import annotations

import logging
import os

from queen_raft.raft.snapshot_file import SnapshotDamaged, remove_quietly, verify_snapshot_stream
from queen_raft.raft.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

RECEIVING_SUFFIX = ".receiving"


class ReceivesLeaderSnapshots:
    """The receiving half of SnapshotSerializer (which sets _file_name and has _kill_writer, _publish)."""

    _incoming = None
    snapshots_rejected = 0
    receives_failed = 0  # transfers this node could not write, since it last installed one
    _receive_failures: ThrottledLog | None = None

    def setTransmissionData(self, data) -> bool:
        """True once a whole snapshot was received, verified and renamed into place."""
        if data is None:
            return False
        chunk, is_first, is_last = data
        receiving_path = self._file_name + RECEIVING_SUFFIX
        if is_first:
            self._close_incoming()
            try:
                self._incoming = open(receiving_path, "wb")
            except OSError as exc:
                self._receive_failed(receiving_path, exc)
                return False
        elif self._incoming is None:
            return False
        try:
            self._incoming.write(chunk)
            if not is_last:
                return False
            self._incoming.flush()
            os.fsync(self._incoming.fileno())
        except OSError as exc:
            self._receive_failed(receiving_path, exc)
            self._close_incoming()
            remove_quietly(receiving_path)
            return False
        self._close_incoming()
        return self._install_received(receiving_path)

    def _receive_failed(self, receiving_path: str, exc: OSError) -> None:
        self.receives_failed += 1
        if self._receive_failures is None:
            self._receive_failures = ThrottledLog(log)
        self._receive_failures.note(logging.ERROR, "writing a snapshot from the leader to %s failed (%s); the "
                                    "leader sends it again", receiving_path, exc)

    def _install_received(self, receiving_path: str) -> bool:
        try:
            with open(receiving_path, "rb") as file:
                verify_snapshot_stream(file, receiving_path)
        except (SnapshotDamaged, OSError) as exc:
            self.snapshots_rejected += 1
            log.error("rejected a snapshot from the leader, keeping this node's state: %s", exc)
            remove_quietly(receiving_path)
            return False
        # A local writer still running holds an older state than the leader's: publishing it after
        # this one would put the snapshot behind the journal that the install is about to clear.
        self._kill_writer()
        published = self._publish(receiving_path)
        if published:
            # An operator replacing a machine watches for this line: the install, then the log.
            log.info("installed a snapshot from the leader into %s", self._file_name)
            self.receives_failed = 0
            if self._receive_failures is not None:
                self._receive_failures.end_episode()
        return published

    def _close_incoming(self) -> None:
        if self._incoming is not None:
            try:
                self._incoming.close()
            except OSError:
                pass
            self._incoming = None
