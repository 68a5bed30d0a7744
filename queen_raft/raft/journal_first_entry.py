"""The log's first entry, read out of the journal once instead of at every look.

pysyncobj's leader reads `log[0][1]` (the first entry's index) for each follower on every pass of
its AppendEntries sender (`SyncObj.__sendAppendEntries`): about four times for each entry it
commits (the entry's send and the commit-only send, to each of two followers), and
`__deleteEntriesFrom`/`__deleteEntriesTo` read it too. Through the journal each such read copies
the whole command out of the mmap and checks its CRC-32 (journal.py, `entry_at`), and after a
compaction the first entry is the snapshot's last one: often a batch of 256 schedules or a call's
worth of pushes, tens of KB (4 MiB at most). log_index.py answers pysyncobj's other index lookups
from the journal's per-entry lists; this one is inline in stock code, so the journal answers it.

FirstEntryMemo keeps the first entry once read, keyed by its file offset, index and term. A
compaction, a truncation, a rewrite or a snapshot install that replaces the first entry changes its
index or term (Raft's log matching: one entry per index and term), so a stale memo is never
served. The entry's checksum was checked when it was read; later looks get those checked bytes.
It holds one command in memory, never more than an entry's cap.
"""

from __future__ import annotations


class FirstEntryMemo:
    """For a journal with per-entry `_offsets`, `_indexes`, `_terms` lists and `entry_at`."""

    _first_memo: tuple | None = None  # ((offset, index, term), (command, index, term))
    first_entry_reads = 0  # reads of the first entry out of the journal (the memo's misses)

    def first_entry(self) -> tuple[bytes, int, int]:
        key = (self._offsets[0], self._indexes[0], self._terms[0])
        memo = self._first_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        entry = self.entry_at(0)
        self._first_memo = (key, entry)
        self.first_entry_reads += 1
        return entry
