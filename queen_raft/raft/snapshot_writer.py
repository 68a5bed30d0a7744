"""The forked snapshot writer, and snapshots sent to and received from the leader.

Replaces pysyncobj 0.3.17's Serializer (file and fork case; install_snapshot_writer) because its
forked child is a second writer of `raft.snapshot` that nobody owns: the child renames its file into
place and exits on its own schedule, so

- a child outlives its node (kill -9, and SIGTERM too: nothing stops it) and renames a snapshot
  taken by the dead process after the successor opened the journal; the successor then loads a
  snapshot that does not match its journal, and pysyncobj clears the journal down to the
  snapshot's two entries and clamps the commit index: acknowledged writes are lost on every node
  that did it. The orphan also keeps the dead node's listening sockets, and
- an orphan and a new child share one `raft.snapshot.tmp`, so one can write into the file the
  other has already renamed into place.

Here the durability rules are:

1. The child writes its own uniquely named tmp file, fsyncs it and exits; it never renames.
2. Only the node process renames, after waitpid reported the child's success, and fsyncs the
   directory, right before pysyncobj compacts the journal (the only caller of checkSerializing
   is __tryLogCompaction, which compacts on SUCCESS). So `raft.snapshot` is replaced only by the
   process that owns the journal, and never by a snapshot older than the one it replaces.
3. The child dies with its parent: PR_SET_PDEATHSIG(SIGKILL), and a getppid check right after the
   fork for a parent that died before the prctl. (The signal follows the forking *thread*, the
   group's tick thread, which ends only when the group is destroyed: then the child should die.)
   stop_writer() kills and reaps a running child on destroy, and a new serializer removes the tmp
   files a dead process left.
4. Every file carries a length and sha256 header (snapshot_file.py), checked on every read.
5. A snapshot received from the leader is written to its own tmp file, fsynced and verified before
   it replaces the local one; a damaged one is rejected (logged), the node keeps its state, and
   the leader sends it again (snapshot_receive.py). A node never sends a snapshot it cannot verify
   itself: the checksum is computed over the chunks as they are sent (no second read of the file
   on the tick thread), and the last chunk, without which the follower installs nothing, goes only
   if it matched.

6. The members of a group take turns to write (compaction_turn.py): a request outside this
   member's turn is declined (pysyncobj asks again at its next tick), so the members' writers,
   each about the state's size in copy-on-write pages, do not all run at once.
7. A writer that failed is followed by a pause before the next (FAILED_WRITER_PAUSE_FIRST_S,
   doubling up to FAILED_WRITER_PAUSE_MAX_S, back to none after a success); so is a writer whose
   journal compaction was refused after it (the rewritten journal did not fit: the journal calls
   pause_after_refused_compaction, doubling while refusals follow one another); a compaction asked
   for explicitly (compaction_turn.force_next_turn) is tried at once, once.

Test hook: with QUEEN_TEST_HOOKS=1, QUEEN_TEST_SNAPSHOT_WRITER_DELAY_MS makes each child sleep that
long before writing, so a fault harness can stop nodes while their writers run. Set without the
flag, the node refuses to start (as clock.py does for its offset).
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
import secrets
import signal
import time
from typing import Any

import pysyncobj.syncobj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from queen_raft import clock
from queen_raft.raft.compaction_turn import turn_of
from queen_raft.raft.forked_writer import prefer_this_process_for_the_oom_killer
from queen_raft.raft.journal import fsync_directory_of
from queen_raft.raft.snapshot_file import (
    HEADER,
    MAGIC,
    PayloadCheck,
    SnapshotDamaged,
    read_snapshot,
    remove_quietly,
    verify_snapshot_stream,
    write_snapshot,
)
from queen_raft.raft.snapshot_receive import RECEIVING_SUFFIX, ReceivesLeaderSnapshots

log = logging.getLogger(__name__)

WRITER_DELAY_ENV = "QUEEN_TEST_SNAPSHOT_WRITER_DELAY_MS"
PR_SET_PDEATHSIG = 1
WRITING_SUFFIX = ".writing"
# pysyncobj's own tmp names, left by an older version of this node.
STOCK_TMP_SUFFIXES = (".tmp", ".1.tmp")
EXIT_WRITER_FAILED = 1
EXIT_WRITER_ORPHANED = 2
# A pause between tries to rewrite a damaged snapshot, so a disk that stays full costs one fork a few seconds.
REWRITE_RETRY_S = 5.0
# The identity of a snapshot file that is not there (a file found unsendable is known by identity).
MISSING_FILE = ("missing",)
# After a writer fails, the next one waits this long, doubled after each further failure up to the
# maximum. pysyncobj asks for a compaction at every tick (about every 50 ms) while its log is over the
# threshold: without the pause a cause that persists (a full disk, a state that cannot be encoded)
# would fork the whole process twenty times a second, each fork pausing the node (bench/fork_pause.py).
FAILED_WRITER_PAUSE_FIRST_S = 1.0
FAILED_WRITER_PAUSE_MAX_S = 60.0


def failed_writer_pause_s(failures_in_a_row: int) -> float:
    """The pause before the next writer after this many writers in a row came to nothing."""
    return min(FAILED_WRITER_PAUSE_MAX_S, FAILED_WRITER_PAUSE_FIRST_S * 2 ** (failures_in_a_row - 1))


def writer_delay_s(environ=os.environ) -> float:
    raw = environ.get(WRITER_DELAY_ENV)
    if raw is None:
        return 0.0
    if not clock.test_hooks_enabled(environ):
        raise ValueError(f"{WRITER_DELAY_ENV} is set but {clock.TEST_HOOKS_ENV}=1 is not: refusing to start")
    return int(raw) / 1000


def _load_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the getppid check and stop_writer remain
        return None


_prctl = _load_prctl()


def remove_stale_tmp_files(file_name: str) -> list[str]:
    """Tmp files of writers and transfers of an earlier process (none of this one is running yet)."""
    stale = glob.glob(glob.escape(file_name) + WRITING_SUFFIX + ".*")
    stale += glob.glob(glob.escape(file_name) + RECEIVING_SUFFIX)
    stale += [file_name + suffix for suffix in STOCK_TMP_SUFFIXES if os.path.exists(file_name + suffix)]
    for path in stale:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
    if stale:
        log.info("removed %d stale snapshot tmp file(s): %s", len(stale), ", ".join(sorted(stale)))
    return stale


def _run_writer(tmp_path: str, dump: tuple, parent_pid: int, delay_s: float) -> None:
    """In the forked child: write, fsync, exit. Never returns; no logging (its locks may have been
    held by another thread at the fork)."""
    code = EXIT_WRITER_FAILED
    try:
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the prctl took effect
            code = EXIT_WRITER_ORPHANED
        else:
            prefer_this_process_for_the_oom_killer()
            if delay_s:
                time.sleep(delay_s)
            write_snapshot(tmp_path, dump)
            code = 0
    except BaseException as exc:
        try:
            os.write(2, f"snapshot writer {os.getpid()} failed: {type(exc).__name__}: {exc}\n".encode())
        except BaseException:
            pass
    finally:
        os._exit(code)


def snapshot_writer_counters(serializer) -> dict:
    """What an operator reads of a group's snapshot writers (GroupStatus.snapshotWriters, /metrics)."""
    return {"published": getattr(serializer, "snapshots_published", 0),
            "failed": getattr(serializer, "writers_failed_total", 0),
            "failing": getattr(serializer, "writers_failed", 0)}


class SnapshotSerializer(ReceivesLeaderSnapshots):
    """pysyncobj's Serializer interface for a file written by a forked child (see the module doc)."""

    def __init__(self, file_name: str, transmission_batch_bytes: int) -> None:
        self._file_name = file_name
        self._batch_bytes = transmission_batch_bytes
        self._delay_s = writer_delay_s()
        self._pid = 0
        self._started_at = 0.0
        self._tmp_path: str | None = None
        self._current_id: Any = 0
        self._transmissions: dict[Any, dict] = {}
        self._unsendable: tuple | None = None  # (inode, mtime, size) of a file found damaged
        # Set when a file to send was found damaged: snapshot_repair.py writes a new one.
        self.rewrite_wanted = False
        self.rewrite_not_before = 0.0  # time.monotonic() before which a failed rewrite is not retried
        self.snapshots_published = 0
        self.snapshots_deferred = 0
        self.writers_failed = 0  # since the last writer that succeeded
        self.writers_failed_total = 0  # since this node started
        self.retry_not_before = 0.0  # time.monotonic() before which no writer starts after a failure
        self._turn = turn_of(file_name)
        remove_stale_tmp_files(file_name)

    # -- the local writer --------------------------------------------------------------------------

    def serialize(self, data, id) -> None:
        if self._pid != 0:
            return
        forced = self._turn is not None and self._turn.forced
        if not forced and time.monotonic() < self.retry_not_before:
            self.snapshots_deferred += 1
            return
        if self._turn is not None and not self._turn.may_start(id):
            self.snapshots_deferred += 1
            return
        tmp_path = f"{self._file_name}{WRITING_SUFFIX}.{os.getpid()}.{secrets.token_hex(4)}"
        parent_pid = os.getpid()
        started_at = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _run_writer(tmp_path, data, parent_pid, self._delay_s)
        self._pid, self._tmp_path, self._current_id, self._started_at = pid, tmp_path, id, started_at

    def declines_now(self, id) -> bool:
        """Whether serialize(..., id) would start no writer now and change nothing but its count:
        False while a writer runs (pysyncobj must still collect it), for a writer asked for
        explicitly, and when the turn would start or end its wait (compaction_gate.py)."""
        if self._pid != 0:
            return False
        turn = self._turn
        if turn is not None and turn.forced:
            return False
        if time.monotonic() < self.retry_not_before:
            return True
        return turn is not None and turn.declines_without_change(id)

    @property
    def writing(self) -> bool:
        """Whether a writer of this node runs (forked, not yet reaped)."""
        return self._pid != 0

    def checkSerializing(self):
        pid = self._pid
        if pid == 0:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        try:
            done_pid, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done_pid, status = pid, -1
        if done_pid == 0:
            return SERIALIZER_STATE.SERIALIZING, self._current_id
        self._pid = 0
        tmp_path, self._tmp_path = self._tmp_path, None
        if status == 0 and self._publish(tmp_path):
            self.writers_failed, self.retry_not_before = 0, 0.0
            self._transmissions = {}
            if self._turn is not None:
                self._turn.writer_seconds = time.monotonic() - self._started_at
            return SERIALIZER_STATE.SUCCESS, self._current_id
        pause_s = self._pause_next_writer(self.writers_failed + 1)
        log.warning("snapshot writer %d failed (wait status %d); the journal is not compacted; the next writer "
                    "starts in %.0f s at the earliest", pid, status, pause_s)
        remove_quietly(tmp_path)
        self._retry_rewrite_if_still_damaged()
        return SERIALIZER_STATE.FAILED, self._current_id

    def pause_after_refused_compaction(self, refusals_in_a_row: int) -> None:
        """The journal refused the compaction after a writer that succeeded (its rewritten file did
        not fit): the next writer waits as after a failed one. pysyncobj's log is still over its
        threshold, so it would otherwise start a writer for every entry applied, each for nothing.
        Counted as a failed writer (status, /metrics): the journal is not compacted either way."""
        pause_s = self._pause_next_writer(refusals_in_a_row)
        log.warning("the journal %s could not be compacted after its snapshot; the next snapshot writer starts "
                    "in %.0f s at the earliest", self._file_name, pause_s)

    def _pause_next_writer(self, failures_in_a_row: int) -> float:
        """Counts one more writer that came to nothing and sets when the next may start; the pause."""
        self.writers_failed = failures_in_a_row
        self.writers_failed_total += 1
        pause_s = failed_writer_pause_s(failures_in_a_row)
        self.retry_not_before = time.monotonic() + pause_s
        return pause_s

    def _retry_rewrite_if_still_damaged(self) -> None:
        """A writer that failed while the file in place is one found damaged (a rewrite that met a
        full disk, say) is tried again after REWRITE_RETRY_S: pysyncobj alone would wait for its next
        compaction, up to LOG_COMPACTION_MIN_TIME_S in an idle group, with a follower stuck behind."""
        if self._unsendable is None or _file_identity(self._file_name) != self._unsendable:
            return
        self.rewrite_wanted = True
        self.rewrite_not_before = time.monotonic() + REWRITE_RETRY_S

    def _publish(self, tmp_path: str) -> bool:
        try:
            os.replace(tmp_path, self._file_name)
            fsync_directory_of(self._file_name)
        except OSError:
            log.exception("could not rename the new snapshot %s into place", tmp_path)
            return False
        self.snapshots_published += 1
        return True

    def stop_writer(self) -> None:
        """Kill and reap a running writer, remove its file, close what is being sent (on destroy)."""
        self._kill_writer()
        for transmission in self._transmissions.values():
            transmission["file"].close()
        self._transmissions = {}

    def _kill_writer(self) -> None:
        pid, self._pid = self._pid, 0
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        tmp_path, self._tmp_path = self._tmp_path, None
        remove_quietly(tmp_path)

    def deserialize(self):
        return read_snapshot(self._file_name)

    # -- sending to a follower (leader) -------------------------------------------------------------

    def getTransmissionData(self, transmissionID):
        if self._pid != 0:
            return None
        transmission = self._transmissions.get(transmissionID)
        if transmission is None:
            transmission = self._open_for_sending()
            if transmission is None:
                return None
            self._transmissions[transmissionID] = transmission
        is_first = transmission["transmitted"] == 0
        try:
            data = transmission["file"].read(self._batch_bytes)
        except OSError as exc:  # None, never False: pysyncobj would index False as a chunk
            self.cancelTransmisstion(transmissionID)
            self._refuse_to_send(transmission["identity"], exc)
            return None
        transmission["transmitted"] += len(data)
        check = transmission["check"]
        if check is not None:
            check.update(data)
        is_last = len(data) == 0
        if is_last:
            self.cancelTransmisstion(transmissionID)
            if check is not None:
                try:
                    check.finish()
                except SnapshotDamaged as exc:
                    # The follower never gets the last chunk, so it never installs what it received.
                    self._refuse_to_send(transmission["identity"], exc)
                    return None
        return data, is_first, is_last

    def _open_for_sending(self) -> dict | None:
        """A transmission of the snapshot file: new-format files are checked as they are read (the
        last chunk goes only if the whole file matched its header); an old gzip file is verified
        whole first. None if the file is known or found damaged."""
        try:
            file = open(self._file_name, "rb")
        except OSError as exc:  # missing or unreadable: as damaged, and asked for at every heartbeat
            self._refuse_to_send(_file_identity(self._file_name), exc)
            return None
        identity = _identity_of(os.fstat(file.fileno()))
        check = None
        try:
            if identity == self._unsendable:
                raise SnapshotDamaged(self._file_name, "found damaged before")
            head = file.read(HEADER.size)
            if head.startswith(MAGIC):
                check = PayloadCheck(self._file_name, head)
            else:
                file.seek(0)
                verify_snapshot_stream(file, self._file_name)
            file.seek(0)
        except (SnapshotDamaged, OSError) as exc:
            file.close()
            self._refuse_to_send(identity, exc)
            return None
        return {"file": file, "transmitted": 0, "check": check, "identity": identity}

    def _refuse_to_send(self, identity: tuple, exc: Exception) -> None:
        if identity != self._unsendable:  # once per damaged file, not once per heartbeat
            self._unsendable = identity
            self.rewrite_wanted = True
            log.error("not sending the snapshot to a follower: it %s: %s",
                      "cannot be read" if isinstance(exc, OSError) else "does not verify", exc)

    def cancelTransmisstion(self, id) -> None:
        transmission = self._transmissions.pop(id, None)
        if transmission is not None:
            transmission["file"].close()


def _identity_of(stat: os.stat_result) -> tuple:
    """Which file this is: a new snapshot renamed into place has a new inode, mtime or size."""
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def _file_identity(path: str) -> tuple:
    try:
        return _identity_of(os.stat(path))
    except OSError:
        return MISSING_FILE


def make_serializer(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer, serializeChecker):
    """Replacement for pysyncobj.syncobj.Serializer (same signature): ours for a snapshot file
    written by a forked child (every group of this service), stock for the other cases."""
    if fileName is not None and tryUseFork and serializer is None and hasattr(os, "fork"):
        return SnapshotSerializer(fileName, transmissionBatchSize)
    return Serializer(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer, serializeChecker)


def install_snapshot_writer() -> None:
    pysyncobj.syncobj.Serializer = make_serializer
