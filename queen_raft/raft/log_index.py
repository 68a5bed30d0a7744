"""Index and term lookups in the Raft log without reading the entries' commands.

pysyncobj 0.3.17 asks the log for the last entry's index or term (`__getCurrentLogIndex`,
`__getCurrentLogTerm`) at 19 places: in every commit scan, for each command appended, for every
AppendEntries and acknowledgement. It asks for the first entry's index in every `__getEntries`, and
for the previous entry's term in every AppendEntries (`__getPrevLogIndexTerm`). It reads each as
`log[position][1]` or `[2]`, and through our journal such a read copies the whole command out of the
mmap and checks its CRC-32 (journal.py, `entry_at`): with 256-op entries of ~20-30 KB, several
copies and checksums of the same entry per tick, for two integers the journal already holds in its
per-entry lists (`indexes`, `terms`).

IndexedLogSyncObj answers those from the lists. The entries themselves (applied, sent) are still
read through `entry_at`, checksum and all. A log without the lists (a stock journal, in tests)
takes the stock path. Overrides SyncObj._SyncObj__getCurrentLogIndex, __getCurrentLogTerm,
__getPrevLogIndexTerm and __getEntries of pysyncobj 0.3.17; tests/unit/test_raft_log_index.py pins
the stock source they replace.
"""

from __future__ import annotations

from pysyncobj import SyncObj

from queen_raft.raft.compaction_gate import CompactionGateSyncObj


def _positions(log) -> tuple[list, list] | tuple[None, None]:
    """The journal's (indexes, terms) by position, or (None, None) for a log without them or an
    empty one (the stock path then raises what it raised)."""
    indexes = getattr(log, "indexes", None)
    if not indexes:
        return None, None
    return indexes, log.terms


class IndexedLogSyncObj(CompactionGateSyncObj):
    def _SyncObj__getCurrentLogIndex(self):
        indexes, _ = _positions(self._SyncObj__raftLog)
        if indexes is None:
            return SyncObj._SyncObj__getCurrentLogIndex(self)
        return indexes[-1]

    def _SyncObj__getCurrentLogTerm(self):
        _, terms = _positions(self._SyncObj__raftLog)
        if terms is None:
            return SyncObj._SyncObj__getCurrentLogTerm(self)
        return terms[-1]

    def _SyncObj__getPrevLogIndexTerm(self, nextNodeIndex):
        indexes, terms = _positions(self._SyncObj__raftLog)
        if indexes is None:
            return SyncObj._SyncObj__getPrevLogIndexTerm(self, nextNodeIndex)
        prev_index = nextNodeIndex - 1
        position = prev_index - indexes[0]
        if 0 <= position < len(indexes):
            return prev_index, terms[position]
        return None, None

    def _SyncObj__getEntries(self, fromIDx, count=None, maxSizeBytes=None):
        log = self._SyncObj__raftLog
        indexes, _ = _positions(log)
        if indexes is None:
            return SyncObj._SyncObj__getEntries(self, fromIDx, count, maxSizeBytes)
        if fromIDx is None or fromIDx < indexes[0]:
            return []
        diff = fromIDx - indexes[0]
        result = log[diff:] if count is None else log[diff:diff + count]
        if maxSizeBytes is None:
            return result
        # Stock's cut (every entry up to the one that reaches the budget), each entry read once: a
        # slice of the journal reads an entry (a copy and a checksum) each time it is indexed.
        total_size = 0
        kept = []
        for entry in result:
            kept.append(entry)
            total_size += len(entry[0])
            if total_size >= maxSizeBytes:
                break
        return kept
