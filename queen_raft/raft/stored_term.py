"""A member takes a new term, or gives a vote, only once its disk holds it.

Raft's safety rests on currentTerm and votedFor being durable before the member acts on them: a
member that restarts in an older term than one it acted in can accept a leader of that older term,
and that leader may overwrite entries this member acknowledged in the newer one (a committed write
lost). pysyncobj 0.3.17's `__setCurrentTerm` sets the term and the vote in memory first and then
stores them: when the store raises (the meta file's directory takes no rename, EACCES; an EIO),
the member goes on in a term its disk does not hold. The message that raised is dropped, but the
next AppendEntries of that term finds the term already current and is appended and acknowledged:
entries of term T acknowledged by a member whose disk says T-1. A full disk does not reach this
(the meta's reserve, journal_storage.CheckedMetaStorer); a meta store that fails while the
journal still writes does.

Here the store goes first and the term and vote are set only after it succeeded. When it fails the
member stays in its stored term: a vote request or AppendEntries of the newer term is dropped (the
sender tries again, as with a lost message), so the member neither votes nor follows in a term it
could lose, and an election it would start does not happen (its deadline is already moved on). The
group goes on with the other members when they are a majority. Once the store succeeds again, the
next message of the newer term is taken as usual and the member catches up.

The failure is logged when it starts and at most once a minute after (with how many stores
failed), not as a traceback per message: a leader's heartbeats arrive twenty times a second. An
operator also reads it without the log: TermStoreFaults is what GroupStatus.termStore, /health's
`term_not_stored` and the queen_raft_term_store_* meters show, set by a failed store and cleared
by the first store that succeeds.

Overrides SyncObj._SyncObj__setCurrentTerm, and wraps _SyncObj__onMessageReceived and _onTick to
catch the TermNotStored it raises, of pysyncobj 0.3.17; tests/unit/test_raft_recipe_syncobj.py pins them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from queen_raft.raft.follower_poll import FollowerPollSyncObj
from queen_raft.raft.throttled_log import ThrottledLog

log = logging.getLogger(__name__)


class TermNotStored(Exception):
    """The meta store of a new term or vote failed: nothing of it was taken."""


class TermStoreFaults:
    """This member's failed term and vote stores, as an operator reads them: how many failed since
    the node started, and whether the last one failed (since when, and why). Noted on the tick
    thread, read by status() on the event loop: the episode is one attribute swapped whole, so a
    reader never sees the time of one failure with the error of another."""

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall_clock = wall_clock
        self.failed = 0  # since this node started
        self._episode: tuple[int, str] | None = None  # (unix ms of its first failure, the last error)
        self._log = ThrottledLog(log)

    def note_failure(self, exc: TermNotStored) -> None:
        self.failed += 1
        since_ms = self._episode[0] if self._episode is not None else int(self._wall_clock() * 1000)
        self._episode = (since_ms, str(exc))
        self._log.note(logging.ERROR, "cannot store the Raft term or vote (%s): this member takes no newer term, "
                       "vote or leader until it can; check the data dir's permissions and disk", exc)

    def note_stored(self, term: int) -> None:
        if self._episode is None:
            return
        self._episode = None
        self._log.end_episode()
        log.warning("the Raft term and vote are stored again (term %d): this member takes newer terms again", term)

    def status(self) -> dict:
        """GroupStatus.termStore: failing while the last store failed, cleared by the next that succeeds."""
        episode = self._episode
        return {"failed": self.failed, "failing": episode is not None,
                "failingSinceMs": episode[0] if episode is not None else None,
                "lastError": episode[1] if episode is not None else None}


class StoredTermSyncObj(FollowerPollSyncObj):
    """FollowerPollSyncObj that takes a term or a vote only once it is stored (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        # Before super().__init__(): the tick thread may run before __init__ returns.
        self.term_store_faults = TermStoreFaults()
        super().__init__(*args, **kwargs)

    def _SyncObj__setCurrentTerm(self, term, votedForNodeId):
        try:
            self._SyncObj__raftLog.setCurrentTerm(term, votedForNodeId)
        except OSError as exc:
            raise TermNotStored(f"term {term}, vote {votedForNodeId}: {exc}") from exc
        self.term_store_faults.note_stored(term)
        self._SyncObj__raftCurrentTerm = term
        self._SyncObj__votedForNodeId = votedForNodeId

    def _SyncObj__onMessageReceived(self, node, message):
        try:
            return super()._SyncObj__onMessageReceived(node, message)
        except TermNotStored as exc:
            self.term_store_faults.note_failure(exc)

    def _onTick(self, timeToWait=0.0):
        try:
            super()._onTick(timeToWait)
        except TermNotStored as exc:  # an election this member could not start
            self.term_store_faults.note_failure(exc)
