"""A compaction the snapshot writer would decline is declined before pysyncobj prepares it.

pysyncobj 0.3.17 calls __tryLogCompaction on every tick. Once the log holds more than
logCompactionMinEntries entries, each call prepares what a writer is handed: a dict of every
SyncObj attribute, the consumers' snapshot handles, the last two applied entries (read out of the
journal, checksums and all) and the cluster set. Only then does our serializer
(snapshot_writer.py) decide whether to fork, and it often declines: it is not this member's turn
(compaction_turn.py), the log is still small next to the last snapshot (the log-to-snapshot
ratio), or writers pause after one that came to nothing. While that holds, the same preparation is
made and thrown away at every tick, two to three ticks per entry under load: on a group with a
large state and small entries (pops and acks next to millions of bytes of queues) that is most of
the time.

CompactionGateSyncObj asks the serializer first (`declines_now`, which changes nothing) and skips
the attempt when the answer is a sure no. Everything else takes the stock path unchanged: a writer
running (pysyncobj must collect it and cut the log on its success), a compaction asked for
explicitly (forceLogCompaction, the turn's force_next), and any case where serialize() would change
something (the turn starting its wait, or the wait having run out). The skip counts as a deferred
writer, as serialize()'s own refusal does.

Overrides SyncObj._SyncObj__tryLogCompaction (wrapped) and reads __serializer,
__forceLogCompaction, __raftLastApplied, __raftLog, __conf and __lastSerializedTime of pysyncobj
0.3.17; tests/unit/test_raft_recipe_syncobj.py pins the source.
"""

from __future__ import annotations

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time

from queen_raft.raft.snapshot_guard import SnapshotGuardedSyncObj


class CompactionGateSyncObj(SnapshotGuardedSyncObj):
    """SnapshotGuardedSyncObj that does not prepare a compaction its serializer would decline."""

    def _SyncObj__tryLogCompaction(self):
        if self._compaction_declined_early():
            return
        SyncObj._SyncObj__tryLogCompaction(self)

    def _compaction_declined_early(self) -> bool:
        if self._SyncObj__forceLogCompaction:
            return False
        declines_now = getattr(self._SyncObj__serializer, "declines_now", None)
        if declines_now is None or not self._compaction_due():
            return False  # a stock serializer, or the stock gate returns before preparing anything
        # The index stock hands serialize(): the entry before the last applied one.
        if not declines_now(self._SyncObj__raftLastApplied - 1):
            return False
        self._SyncObj__serializer.snapshots_deferred += 1
        return True

    def _compaction_due(self) -> bool:
        """pysyncobj's own gate: past its entry threshold or its time threshold (unsplit)."""
        conf = self._SyncObj__conf
        return (len(self._SyncObj__raftLog) > conf.logCompactionMinEntries
                or monotonic_time() - self._SyncObj__lastSerializedTime > conf.logCompactionMinTime)
