"""The leader's AppendEntries sends, one per batch of new commands instead of one per command.

Stock pysyncobj 0.3.17 with appendEntriesUseBatch=False (which we need: with batching every commit
waits for the next heartbeat) calls __sendAppendEntries after *each* command it appends in
_checkCommandsToApply. With N commands queued, each follower gets N append_entries messages of one
entry each: N pickles, N zlib frames and N send() syscalls per follower on the leader, and on each
follower N parses, N handler runs and N acknowledgements back (each pickled and sent, and each run
through the leader's handler). Per entry that is most of the Raft layer's cost under load.

CoalescingSyncObj lets _checkCommandsToApply append the queued commands and sends once after them
(and every APPEND_SEND_EVERY_ENTRIES entries within a long run, so the first entry of a burst does
not wait for the whole queue). The message carries every entry from each follower's nextIndex,
exactly what the per-command sends carried in total, so what a follower appends, acknowledges and
commits is unchanged; only the framing is coarser. Nothing else waits on those sends within the
tick: the leader counts its own entries at the next tick's commit scan, after the group-commit
flush of this tick (transport.GroupTransport._onTick), and followers' acknowledgements arrive in
poll(), after both.

A send that would only repeat the commit index a follower already has (stock's send after every
apply, when this tick's coalesced send carried the new commit) is left out by the base class,
quiet_messages.QuietMessagesSyncObj, which every send here goes through.

Overrides SyncObj._checkCommandsToApply (wrapping it), SyncObj._SyncObj__sendAppendEntries and
SyncObj._SyncObj__applyLogEntries (wrapped: new work first, see there) of pysyncobj 0.3.17; tests/unit/test_raft_recipe_syncobj.py pins the source this relies on.
"""

from __future__ import annotations

from pysyncobj import SyncObj

from queen_raft.raft.quiet_messages import QuietMessagesSyncObj

# Within one _checkCommandsToApply run (bounded by pysyncobj to appendEntriesPeriod), send what was
# appended at least every this many entries: the first entry of a 2,048-command burst (max_in_flight)
# then waits for ~64 appends (well under a millisecond), not for the whole run, while the number of
# messages per follower still drops 64-fold under load.
APPEND_SEND_EVERY_ENTRIES = 64


class CoalescingSyncObj(QuietMessagesSyncObj):
    """QuietMessagesSyncObj (an IndexedLogSyncObj, a SnapshotGuardedSyncObj, a LogMatchingSyncObj)
    whose leader sends AppendEntries once per batch of new commands."""

    def __init__(self, *args, **kwargs):
        # Before super().__init__(): the tick thread may run before __init__ returns.
        self._coalescing_appends = False
        self._appends_waiting = 0  # entries appended since the last send, while coalescing
        self.append_sends_coalesced = 0  # stock's per-command sends saved (requested - sent)
        super().__init__(*args, **kwargs)

    def _checkCommandsToApply(self):
        self._coalescing_appends = True
        self._appends_waiting = 0
        try:
            super()._checkCommandsToApply()
        finally:
            self._coalescing_appends = False
            if self._appends_waiting:
                self._appends_waiting = 0
                self.append_sends_coalesced -= 1  # this send stands for one of the folded ones
                super()._SyncObj__sendAppendEntries()

    def _SyncObj__applyLogEntries(self):
        # Applying a committed 256-op entry holds the tick thread on every replica, and stock
        # pysyncobj applies before the tick appends the commands queued meanwhile (on the leader the
        # next entry's send would wait on the apply) and before the tick callbacks flush the journal
        # and release the acknowledgements held behind it (on a follower the next entry's commit
        # would wait on the apply). Both go first, so the next commit round travels while this node
        # applies. An acknowledgement leaves only after the flush that covers its entries, and the
        # leader's own entries are flushed (here or in the tick callbacks) before its next commit
        # scan counts it.
        if self._SyncObj__transport.ready and self._SyncObj__raftCommitIndex > self._SyncObj__raftLastApplied:
            self._checkCommandsToApply()
            flush_and_release = getattr(self._SyncObj__transport, "flush_and_release", None)
            if flush_and_release is not None:
                flush_and_release()
        return SyncObj._SyncObj__applyLogEntries(self)

    def _SyncObj__sendAppendEntries(self):
        if self._coalescing_appends:
            self._appends_waiting += 1
            if self._appends_waiting < APPEND_SEND_EVERY_ENTRIES:
                self.append_sends_coalesced += 1
                return
            self._appends_waiting = 0
        super()._SyncObj__sendAppendEntries()
