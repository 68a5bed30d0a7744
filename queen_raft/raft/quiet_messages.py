"""Raft messages that carry nothing new are not sent: the leader's repeated commit index, the
follower's repeated answer.

Stock pysyncobj 0.3.17 with appendEntriesUseBatch=False exchanges four messages per entry on each
leader-follower link, each pickled, sealed, sent, opened, unpickled and handled: the AppendEntries
carrying the entry, the follower's answer (held until its journal flush, transport.py), then,
after the leader applies, an AppendEntries carrying only the new commit index (`_onTick` sends one
after every apply: `__applyLogEntries` returns needSendAppendEntries=True), and the answer to that.
Two of them are dropped when they would repeat what the other end already has:

1. Leader (`_SyncObj__sendAppendEntries`). A send that is not the periodic heartbeat goes only when
   some follower needs it. A follower needs nothing when the last AppendEntries this leader sent it
   carried the current term and commit index, and its nextIndex is past the last log index (so
   there is no entry left to send it, and no snapshot transmission in progress: pysyncobj sends a
   snapshot only while nextIndex is at or below the log's first index). A follower not connected
   now needs nothing either: stock sends it nothing. When any follower needs the send, it goes to
   every follower as stock sends it. The periodic heartbeat (`__newAppendEntriesTime`, every
   appendEntriesPeriod) is untouched: once it is due, the send goes whatever was sent before, and
   a skipped send leaves its time where the last real send put it.
   The case it removes: leader_append.CoalescingSyncObj appends and sends the queued commands
   after the commit scan and before the apply, so that send already carries the new commit index,
   and stock's post-apply send would repeat it to every follower with no entries. When nothing was
   sent after the commit scan (a lone write committed, no command queued), the post-apply send
   still goes: a follower learns the commit at once, and it answers the calls proposed through it
   and its reads only once it applies.

2. Follower (`_SyncObj__sendNextNodeIdx`). The answer to an AppendEntries that carried no entries
   is not sent when it succeeded, asks no reset, and is identical to the last answer this node sent
   that leader (same term, same next index) within the answer window (answer_window_s). Every
   other answer goes: one to a message that carried entries, a failure (with or without a reset),
   a new next index, a new term, a snapshot's. An idle leader's heartbeats come one period apart,
   so every other one is answered; the other skipped ones are the answers to commit-only messages
   that arrive right after the acknowledgement of their entries.
   A record is per leader node, forgotten when the link to it drops or is made again (an answer
   sent into a dying connection may never have arrived), and the answers still go through
   transport.send, so the group-commit hold is unchanged: an answer that carries new entries leaves
   only after the flush that covers them.

Why no guarantee weakens. The leader moves a follower's matchIndex and nextIndex, and so its commit
decisions, only on answers (`_onMessageReceived`, 'next_node_idx'): a success raises matchIndex and
nextIndex only to a higher acknowledged index, a reset sets nextIndex. A skipped answer repeats the
last one the leader was sent, so handling it would change neither. The only other thing the leader
takes from an answer is `__lastResponseTime`, which leaderFallbackTimeout (2.5 s by default) reads
to step down without a majority: answers still go at least every two heartbeat periods while
heartbeats arrive, and the window is kept under a fifth of leaderFallbackTimeout. A skipped
AppendEntries repeats the term and commit index the follower was last sent and has no entry to
carry; its prevLogIdx/prevLogTerm are those the follower already acknowledged or was sent.
Recovery never hangs on a skipped message: pysyncobj's leader resends only after an answer that
says so. A follower that lost entries (a lost message, a restart) answers the next AppendEntries
with a failure and a reset, and failures are always sent; a restarted follower has no record and
answers everything; a reconnected link starts without records at both ends. Heartbeats, which find
the gaps, are never skipped.

Overrides SyncObj._SyncObj__sendAppendEntries, __sendNextNodeIdx, __onMessageReceived (wrapped),
__onNodeConnected and __onNodeDisconnected (wrapped) of pysyncobj 0.3.17, and reads
__newAppendEntriesTime, __raftNextIndex, __otherNodes, __readonlyNodes and __connectedNodes;
tests/unit/test_raft_recipe_syncobj.py pins the source this relies on.
"""

from __future__ import annotations

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE

from queen_raft.raft.log_index import IndexedLogSyncObj

# A repeated answer to an entry-less AppendEntries goes anyway once this many heartbeat periods
# passed since the last answer to that leader. An idle group's heartbeats come a period apart (or a
# little more), so every other one is answered: the leader hears each follower at least every two
# periods (~100 ms), which is all it takes from a repeated answer (__lastResponseTime, read against
# leaderFallbackTimeout); half of an idle group's answers, and of the leader's wake-ups to read
# them, are left out. Under load the skipped ones are the commit-only messages' answers.
ANSWER_REPEAT_WINDOW_PERIODS = 1.5
# ... and never longer than this share of leaderFallbackTimeout, however the two are configured:
# a leader must hear a majority within it, or it steps down.
ANSWER_WINDOW_MAX_FALLBACK_SHARE = 0.2


def answer_window_s(append_entries_period_s: float, leader_fallback_timeout_s: float) -> float:
    """How long after an answer a repeat of it is left out (see ANSWER_REPEAT_WINDOW_PERIODS)."""
    return min(ANSWER_REPEAT_WINDOW_PERIODS * append_entries_period_s,
               ANSWER_WINDOW_MAX_FALLBACK_SHARE * leader_fallback_timeout_s)


class QuietMessagesSyncObj(IndexedLogSyncObj):
    """IndexedLogSyncObj that sends no AppendEntries and no answer that carries nothing new (see
    the module docstring)."""

    def __init__(self, *args, **kwargs):
        # Before super().__init__(): the tick thread may run before __init__ returns, and attributes
        # set then stay out of SyncObj's snapshots.
        self._commit_sent: dict = {}  # follower -> (term, commit index) of its last AppendEntries
        self._last_answer: dict = {}  # leader -> ((term, next index), monotonic time sent)
        self._answering_empty_append = False
        self.append_entries_skipped = 0  # per follower: sends that carried nothing new
        self.answers_skipped = 0  # answers identical to the last one, inside the window
        super().__init__(*args, **kwargs)

    # -- leader -----------------------------------------------------------------------------------

    def _SyncObj__sendAppendEntries(self):
        skipped = self._followers_needing_nothing()
        if skipped is not None:
            self.append_entries_skipped += skipped
            return
        SyncObj._SyncObj__sendAppendEntries(self)
        self._note_commit_sent()

    def _followers_needing_nothing(self) -> int | None:
        """How many connected followers a send now would have repeated itself to, when none of
        them needs it and the heartbeat is not due; None when it must go."""
        if self._SyncObj__raftState != _RAFT_STATE.LEADER or self._SyncObj__readonlyNodes:
            return None
        if monotonic_time() > self._SyncObj__newAppendEntriesTime:
            return None  # the periodic heartbeat: always sent
        current = (self._SyncObj__raftCurrentTerm, self._SyncObj__raftCommitIndex)
        last_index = self._SyncObj__getCurrentLogIndex()
        next_index = self._SyncObj__raftNextIndex
        connected = self._SyncObj__connectedNodes
        skipped = 0
        for node in self._SyncObj__otherNodes:
            if next_index.get(node, 0) <= last_index:
                return None  # entries (or a snapshot) to send it
            if node in connected:
                if self._commit_sent.get(node) != current:
                    return None
                skipped += 1
        return skipped

    def _note_commit_sent(self) -> None:
        """After a stock send: every follower still connected was sent at least one AppendEntries,
        all carrying this term and commit index."""
        current = (self._SyncObj__raftCurrentTerm, self._SyncObj__raftCommitIndex)
        connected = self._SyncObj__connectedNodes
        for node in self._SyncObj__otherNodes:
            if node in connected:
                self._commit_sent[node] = current
            else:
                self._commit_sent.pop(node, None)

    # -- follower ---------------------------------------------------------------------------------

    def _SyncObj__onMessageReceived(self, node, message):
        self._answering_empty_append = (
            message.get("type") == "append_entries" and "prevLogIdx" in message
            and "transmission" not in message and not message.get("entries"))
        try:
            super()._SyncObj__onMessageReceived(node, message)
        finally:
            self._answering_empty_append = False

    def _SyncObj__sendNextNodeIdx(self, node, reset=False, nextNodeIdx=None, success=False):
        if nextNodeIdx is None:
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        answer = (self._SyncObj__raftCurrentTerm, nextNodeIdx)
        now = monotonic_time()
        if self._answering_empty_append and success and not reset:
            last = self._last_answer.get(node)
            conf = self._SyncObj__conf
            window_s = answer_window_s(conf.appendEntriesPeriod, conf.leaderFallbackTimeout)
            if last is not None and last[0] == answer and now - last[1] < window_s:
                self.answers_skipped += 1
                return
        # Only a plain success can be repeated away; after anything else the next one goes.
        if success and not reset:
            self._last_answer[node] = (answer, now)
        else:
            self._last_answer.pop(node, None)
        SyncObj._SyncObj__sendNextNodeIdx(self, node, reset, nextNodeIdx, success)

    # -- both: a link made or lost starts without records -------------------------------------------

    def _SyncObj__onNodeConnected(self, node):
        self._forget(node)
        SyncObj._SyncObj__onNodeConnected(self, node)

    def _SyncObj__onNodeDisconnected(self, node):
        self._forget(node)
        SyncObj._SyncObj__onNodeDisconnected(self, node)

    def _forget(self, node) -> None:
        self._commit_sent.pop(node, None)
        self._last_answer.pop(node, None)

    def message_counters(self) -> dict:
        """Raft messages this node handed to a live connection, and those it left out as repeats."""
        sent = getattr(self._SyncObj__transport, "messages_sent", None) or {}
        return {
            "appendEntriesSent": sent.get("append_entries", 0),
            "answersSent": sent.get("next_node_idx", 0),
            "appendEntriesSkipped": self.append_entries_skipped,
            "answersSkipped": self.answers_skipped,
        }
