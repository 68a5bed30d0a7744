"""The follower's AppendEntries as Raft states it: skip what the log already holds, truncate only at
the first conflict, and never below what is committed.

Stock pysyncobj 0.3.17 (`SyncObj.__onMessageReceived`, 'append_entries' carrying 'prevLogIdx'):
once prevLogIdx/prevLogTerm match, it deletes every entry after prevLogIdx whenever the log holds
any, then re-adds every entry of the message. A leader that sends overlapping ranges (its nextIndex
goes back when an older acknowledgement arrives after it advanced, appendEntriesUseBatch=False) so
made followers delete and re-add entries they had already applied, logging CRITICAL "truncating
already-applied log entries" ~100 times a minute under load, and rewriting the journal's tail
each time. A heartbeat (no entries) whose prevLogIdx is behind the log's end deleted the tail too.

Raft (Figure 2, AppendEntries rule 3) deletes only from the first entry whose term conflicts with
the leader's, and a committed entry never conflicts. LogMatchingSyncObj runs one step before the
stock handler, for an append_entries of the current or a newer term that carries prevLogIdx:

1. prevLogIdx missing or of another term: unchanged (stock answers with a reset, touches nothing).
2. It counts the leading entries of the message the log already holds (same index and term). By
   Raft's Log Matching property those and everything before them equal the leader's log, so the
   log is verified through prevLogIdx + that count ("verified_through").
3. The log ends inside the message or right at its end, or the first unmatched entry conflicts
   above the commit index: it hands the stock handler the same message without the
   held entries, prevLogIdx/prevLogTerm moved to verified_through. The stock code then either
   appends at the end of the log (no deletion), or deletes from the first conflicting entry
   (Raft's rule 3) and appends. Its acknowledgement (last entry of the message + 1) and commit
   index (min(leader commit, new last index)) are the ones the original message would have had.
4. Everything in the message held, and the log goes further: the entries after it stay (they may
   be the leader's later entries, already received). The stock handler gets the message as a bare
   heartbeat (no prevLogIdx: leader, term, election deadline, commit) with the leader's commit
   index capped at verified_through, so no entry after it is committed on this message's word
   (Raft: min(leaderCommit, index of last new entry)); the acknowledgement is verified_through + 1,
   exactly what stock would have sent after its truncation.
5. The first unmatched entry conflicts at or below the commit (or applied) index: the leader's log
   differs from an entry this node committed. That is a broken Raft invariant, not something to
   repair by deleting: CRITICAL, the log is left as it is, the message counts only as a heartbeat
   (commit capped as in 4, which moves nothing), and the answer is a plain failure (no reset, no
   success), so the leader keeps this node as a lagging follower and the rest of the group goes on.

6. A message without prevLogIdx: the leader's snapshot, sent in parts (`serialized`, None while
   the leader still prepares it). Stock sets the commit index to min(leader commit, last index) on
   every such message, yet nothing in it says which entries of this log match the leader's. A
   deposed leader's tail (entries it appended alone, in its old term, after it was cut off) was so
   committed and applied, and the callers it had accepted them from were answered success for
   writes the group never held. Such a message now commits nothing on its own: the commit index
   stays where it was, and rises to the snapshot's last index when the snapshot is installed (its
   entries are the leader's committed ones). The leader's word stays in __leaderCommitIndex.

Messages of the chunked path ('transmission') pass unchanged: our leaders never send them, since
APPEND_ENTRIES_BATCH_SIZE_BYTES is above MAX_ENTRY_BYTES (settings.py) and larger entries are refused.

Group commit (fsync="group", transport.GroupTransport) is unaffected. Every acknowledgement still
leaves through SyncObj.__sendNextNodeIdx -> transport.send, which holds a `next_node_idx` while the
journal is dirty and releases it, in order per link, after the tick's flush. An acknowledgement now
covers two kinds of entries:
- entries this message added: GroupCommitJournal.add marked the journal dirty, so the ack waits for
  the flush that covers them;
- entries skipped because already held: an earlier message added them. Either a flush has run
  since, and they are on disk; or none has, and then the journal is still dirty from their add
  (`dirty` is one flag for the whole file, cleared only by flush_if_dirty after an fdatasync of the
  whole journal file, or by a compaction whose rewritten file was flushed before its rename), so this ack is
  held behind the same flush. An ack sent while the journal is clean therefore never covers an
  unflushed entry.
Skipping also removes stock's exposure: it never deletes and rewrites records this node has
already acknowledged as durable, and overlapping sends do not dirty the journal (fewer flushes).

SyncObj's own attributes that exist when its __init__ ends are excluded from its snapshots; the
counters below are set before super().__init__() for that reason (and because the tick thread may
deliver messages before __init__ returns).

Overrides SyncObj._SyncObj__onMessageReceived (wrapping it) and reads __getEntries, __sendNextNodeIdx,
__raftCurrentTerm, __raftCommitIndex, __raftLastApplied and __leaderCommitIndex of pysyncobj
0.3.17; tests/unit/test_raft_recipe_syncobj.py pins the handler's source and fails if any of it changes.
"""

from __future__ import annotations

import logging

from pysyncobj import SyncObj

from queen_raft.raft.journal_spill import SpillFull

log = logging.getLogger(__name__)


def count_held_prefix(held_after_prev: list, sent: list) -> int:
    """How many leading entries of `sent` the log already holds with the same index and term.

    `held_after_prev` is the log from prevLogIdx + 1 on (at least len(sent) entries of it when the
    log has them), `sent` the message's entries; both are (command, index, term).
    """
    count = 0
    for held, new in zip(held_after_prev, sent):
        if held[1] != new[1] or held[2] != new[2]:
            break
        count += 1
    return count


class LogMatchingSyncObj(SyncObj):
    """SyncObj whose follower appends only what its log lacks (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        # Before super().__init__(): see the module docstring.
        self.held_entries_skipped = 0  # received entries the log already held (same index, term)
        self.overlaps_kept = 0  # appends overlapping the log's tail that deleted nothing (stock deleted)
        self.conflicts_truncated = 0  # appends that deleted a conflicting suffix (Raft's rule 3)
        self.conflicting_appends_refused = 0  # appends that would have deleted a committed entry
        self.appends_refused_disk_full = 0  # appends refused: full disk, and the memory for waiting records too
        super().__init__(*args, **kwargs)

    def _SyncObj__onMessageReceived(self, node, message):
        if message["type"] == "append_entries" and message["term"] >= self._SyncObj__raftCurrentTerm:
            if "prevLogIdx" not in message:
                self._snapshot_message(node, message)  # (6)
                return
            if "transmission" not in message:
                message = self._without_held_entries(node, message)
                if message is None:
                    return
            try:
                SyncObj._SyncObj__onMessageReceived(self, node, message)
            except SpillFull:
                # The journal logged it once; the leader re-sends these entries at every heartbeat
                # while the disk stays full, and raised out of the tick each would log a traceback.
                # No acknowledgement left: the entries are refused, as the journal meant.
                self.appends_refused_disk_full += 1
            return
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _snapshot_message(self, node, message: dict) -> None:
        """(6) of the module docstring: stock's handling with the commit index held where it was,
        or moved to the snapshot's last index once it is installed."""
        leader_commit = message["commit_index"]
        held = min(leader_commit, self._SyncObj__raftCommitIndex)
        SyncObj._SyncObj__onMessageReceived(self, node, dict(message, commit_index=held))
        installed_through = self._SyncObj__raftLastApplied
        if installed_through > self._SyncObj__raftCommitIndex:  # the snapshot's entries are committed
            self._SyncObj__raftCommitIndex = installed_through
            self._SyncObj__raftLog.setRaftCommitIndex(installed_through)
        self._SyncObj__leaderCommitIndex = leader_commit

    def _without_held_entries(self, node, message: dict) -> dict | None:
        """The message for the stock handler, or None when this step answered it already."""
        prev_idx = message["prevLogIdx"]
        sent = message.get("entries", [])
        # prevLogIdx, the entries the message covers, and one more: enough to see whether the log
        # goes past the message, without copying the whole tail.
        held = self._held_index_terms(prev_idx, len(sent) + 2)
        if not held or held[0][2] != message["prevLogTerm"]:
            return message  # (1) stock answers with a reset and touches no entry
        held_after_prev = held[1:]
        matched = count_held_prefix(held_after_prev, sent)
        verified_through = prev_idx + matched
        self.held_entries_skipped += matched

        if matched < len(sent) and matched < len(held_after_prev):  # sent[matched] conflicts
            first_conflict = verified_through + 1
            protected = max(self._SyncObj__raftCommitIndex, self._SyncObj__raftLastApplied)
            if first_conflict <= protected:  # (5)
                self.conflicting_appends_refused += 1
                log.critical(
                    "Raft invariant broken: the leader's entry %d (term %d) conflicts with this node's "
                    "(term %d) at or below its commit index %d (applied %d); refused the append and "
                    "kept the log as it is",
                    first_conflict, sent[matched][2], held_after_prev[matched][2],
                    self._SyncObj__raftCommitIndex, self._SyncObj__raftLastApplied,
                )
                self._accept_as_heartbeat(node, message, verified_through)
                self._SyncObj__sendNextNodeIdx(node, success=False, reset=False)
                return None
            self.conflicts_truncated += 1
        elif held_after_prev:  # the message overlaps the log's tail without a conflict
            self.overlaps_kept += 1
            if matched < len(held_after_prev):  # (4): every sent entry held, the log goes further
                self._accept_as_heartbeat(node, message, verified_through)
                self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=verified_through + 1, success=True)
                return None

        if matched == 0:
            return message  # (3) nothing held to skip: stock's handling is already Raft's
        return dict(message, prevLogIdx=verified_through, prevLogTerm=held[matched][2], entries=sent[matched:])  # (3)

    def _held_index_terms(self, from_idx: int, count: int) -> list:
        """The log's entries from `from_idx` on, at most `count`, as (None, index, term): all this
        step compares. Read from the journal's per-entry index and term lists when it keeps them,
        so that no command is copied out of the file and checksummed for two integers; a log
        without them (pysyncobj's in-memory one, in tests) is sliced as stock does."""
        raft_log = self._SyncObj__raftLog
        indexes = getattr(raft_log, "indexes", None)
        if not indexes:
            return self._SyncObj__getEntries(from_idx, count)
        if from_idx < indexes[0]:
            return []  # before the snapshot: what __getEntries answers
        start = from_idx - indexes[0]
        return [(None, index, term) for index, term in zip(indexes[start:start + count], raft_log.terms[start:start + count])]

    def append_counters(self) -> dict:
        return {
            "heldEntriesSkipped": self.held_entries_skipped,
            "overlapsKept": self.overlaps_kept,
            "conflictsTruncated": self.conflicts_truncated,
            "conflictsRefused": self.conflicting_appends_refused,
            "refusedDiskFull": self.appends_refused_disk_full,
        }

    def _accept_as_heartbeat(self, node, message: dict, verified_through: int) -> None:
        """Leader, term, election deadline and commit index from the message; no log change."""
        leader_commit = message["commit_index"]
        SyncObj._SyncObj__onMessageReceived(self, node, {
            "type": "append_entries",
            "term": message["term"],
            "commit_index": min(leader_commit, verified_through),
        })
        # The cap is for this node's commit only; what the leader said stays what it said.
        self._SyncObj__leaderCommitIndex = leader_commit
