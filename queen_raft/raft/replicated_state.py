"""The tenant state as pysyncobj sees it: one replicated method, and snapshots in the state's format.

- `apply(entry: bytes)` is the only replicated method (another @replicated method would renumber
  pysyncobj's funcIDs and break existing journals). It decodes msgpack and hands the command to
  the state under `lock`. An entry is one command (a msgpack map) or a batch of commands
  (proposal_batch.py: a msgpack array of single-command entries); a batch applies each of its
  commands exactly as its own entry would have been applied, in order, and answers the list of their
  results. It never raises: a replicated method that raises is retried on every tick forever and the
  group stops applying.
- Fields are assigned after `super().__init__()`: SyncObjConsumer records the attributes that exist
  at its init as "not state" (research: fields set earlier were silently left out of dumps).
- Snapshots go through pysyncobj's forked path: `_serialize()` runs on the tick thread and only
  returns a SnapshotBlob holding the state; pickling it (in the forked child) encodes the state,
  so encoding a large state never stalls the tick thread. A state with `snapshot_chunks()` pickles
  as the list of its snapshot's chunks, pulled one at a time as the pickler writes them to the
  file (snapshot_file.write_snapshot): the child never holds the encoded state whole. Restoring
  takes the list, or the bytes of a file written before (or by `cluster restore`).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable

import msgpack
from pysyncobj import SyncObjConsumer, replicated

from queen_raft.raft.proposal_batch import decode_batch, is_batch_entry

log = logging.getLogger(__name__)


class SnapshotBlob:
    """Pickles as the state's snapshot, encoded when pickled (in the forked child): a list of its
    chunks (pickle's list items, taken from an iterator as they are written), or its bytes for a
    state that encodes only whole."""

    __slots__ = ("_state",)

    def __init__(self, state) -> None:
        self._state = state

    def __reduce__(self):
        chunks = getattr(self._state, "snapshot_chunks", None)
        if chunks is None:
            return (bytes, (self._state.snapshot(),))
        return (list, (), None, iter(chunks()))


def encode_command(command: dict) -> bytes:
    # use_bin_type keeps bytes as msgpack bin, so they decode as bytes (payloads stay bytes).
    return msgpack.packb(command, use_bin_type=True)


def decode_command(entry: bytes) -> dict:
    return msgpack.unpackb(entry, raw=False)


class ReplicatedTenantState(SyncObjConsumer):
    def __init__(
        self,
        state_factory: Callable[[], object],
        state_restore: Callable[[bytes], object],
        on_applied: Callable[[int | None], None],
    ) -> None:
        super().__init__()
        self.state = state_factory()
        # Held by apply (tick thread) and by reads (loop thread): a read never sees half an entry.
        self.lock = threading.Lock()
        self._state_restore = state_restore
        # Called on the tick thread after each apply with the state's next due instant.
        self._on_applied = on_applied
        self.internal_errors = 0
        # Answers nobody reads: an entry this node did not propose is applied for its effect only
        # (a follower applies every write of the leader's clients). With skip_unread_answers, the
        # state is told (`answering`, when it has that attribute) to leave out the per-row result
        # maps of such entries. This node's own entries are counted in by submit() (loop thread) and
        # out by their answer (tick thread, after the apply): one writer each, so while one of them
        # is unanswered, every apply here answers in full. An answer pysyncobj never delivers keeps
        # this node answering in full, which costs time only.
        self.skip_unread_answers = False
        self.submitted = 0
        self.answered = 0

    def submit(self, entry: bytes, on_answer: Callable[[object, object], None]) -> None:
        """Propose entry through pysyncobj (loop thread); on_answer(result, error) on the tick thread."""
        def answered(result, error) -> None:
            self.answered += 1
            on_answer(result, error)

        self.submitted += 1
        try:
            self.apply(entry, callback=answered)
        except BaseException:
            self.submitted -= 1  # never queued: nothing of ours is in flight for it
            raise

    def _tell_state_whether_answering(self) -> None:
        state = self.state
        if self.skip_unread_answers and getattr(state, "answering", None) is not None:
            state.answering = self.submitted != self.answered

    @replicated
    def apply(self, entry):
        self._tell_state_whether_answering()
        if is_batch_entry(entry):
            return self._apply_batch(entry)
        result, next_due, applied = self._apply_one(entry)
        if applied:
            self._report_due(next_due)
        return result

    def _apply_batch(self, entry) -> list | dict:
        try:
            commands = decode_batch(entry)
        except Exception as exc:  # the same bytes fail alike on every replica: one refusal for all
            self.internal_errors += 1
            log.exception("a batch entry did not decode; answering an internal error for all of it")
            return {"error": "internal", "message": f"{type(exc).__name__}: {exc}"}
        results = []
        any_applied = False
        for command in commands:
            # Each command alone, as its own entry would be: one's refusal or error is its own.
            result, _, applied = self._apply_one(command, with_next_due=False)
            results.append(result)
            any_applied = any_applied or applied
        if any_applied:
            # The state after the whole entry is what the tick sleeps on: read once, not per command.
            try:
                with self.lock:
                    last_due = self.state.next_due_at()
            except Exception:
                self.internal_errors += 1
                log.exception("next_due_at failed after a batch; the tick keeps its last instant")
            else:
                self._report_due(last_due)
        return results

    def _apply_one(self, entry, with_next_due: bool = True) -> tuple[object, int | None, bool]:
        """(result, next due instant (None unless with_next_due), whether it applied) of one
        single-command entry; never raises."""
        try:
            command = decode_command(entry)
            with self.lock:
                result = self.state.apply(command)
                next_due = self.state.next_due_at() if with_next_due else None
        except Exception as exc:  # never let a replicated method raise: it wedges the group
            self.internal_errors += 1
            log.exception("apply failed; answering an internal error instead of raising")
            return {"error": "internal", "message": f"{type(exc).__name__}: {exc}"}, None, False
        return result, next_due, True

    def _report_due(self, next_due: int | None) -> None:
        try:
            self._on_applied(next_due)
        except Exception:
            log.exception("on_applied hook failed")

    def _serialize(self):
        return SnapshotBlob(self.state)

    def _deserialize(self, data):
        try:
            restored = self._state_restore(data if isinstance(data, list) else bytes(data))
            with self.lock:
                self.state = restored
                next_due = restored.next_due_at()
        except Exception:
            # pysyncobj logs and carries on with what it has; say what failed first.
            log.exception("restoring the state from a snapshot failed")
            raise
        # A restored million-timer state is millions of long-lived objects; the first full
        # collection would walk them all on the tick thread, for long enough to lose the leadership. Freezing moves them out of the collector's generations for good.
        gc.freeze()
        self._on_applied(next_due)
