"""At start: fit the journal to the snapshot, or refuse to start. Never drop a committed entry.

pysyncobj 0.3.17 loads the snapshot on its first tick and requires journal[0:2] to be the
snapshot's last two entries; otherwise it clears the journal down to those two and clamps the
commit index to what is left ("raftCommitIndex (X) exceeds journal end (Y) after loading dump ...
clamping"), and a snapshot that fails to load leaves an empty state that votes, leads and serves.
Both lose acknowledged writes without a word. The journal is opened (on the main thread, in
SyncObj.__init__) before that load, and this is where the two are compared:

| what is found | what happens |
|---|---|
| no snapshot, or journal[0:2] is the snapshot's [prev, last] | nothing to do |
| the snapshot's last entry is in the journal (same index, term and command) | the journal is rewritten as [prev, last, every entry after last] (the process died between a snapshot's rename and the compaction that follows it): nothing is lost |
| the journal starts right after the snapshot's last entry | the same rewrite, with the whole journal kept |
| the journal ends before the snapshot's last entry | left to pysyncobj: the snapshot covers every entry the journal has |
| the snapshot does not verify or decode | refused: the file, the problem |
| a gap: the journal starts after the snapshot's last entry + 1 | refused: those entries are in neither |
| the journal's entry at the snapshot's last index differs, above the commit index | the journal is rewritten as [prev, last]: that entry and those after it were never committed (a snapshot holds committed entries only) |
| the journal's entry at the snapshot's last index differs, at or below the commit index | refused |
| the commit index (.meta) is beyond the last entry the journal and snapshot hold | refused |

Refused means DataDirRefused (snapshot_file.py): the node exits with code 65 and one message
naming the file, what is wrong, and the recovery step (wipe this node's data dir and restart it;
it re-syncs from the others). A node with damaged data must not take part: with an empty or
truncated state it would vote and could lead with less than what was committed.
"""

from __future__ import annotations

import logging
import os

from queen_raft.raft.snapshot_file import DataDirRefused, SnapshotDamaged, read_snapshot

log = logging.getLogger(__name__)


def reconcile_journal_with_snapshot(journal) -> None:
    """journal: a CompactionGuardedJournal just opened, with its full_dump_file (may not exist)."""
    path = journal.full_dump_file
    snapshot_end = 0
    if path is not None and os.path.exists(path):
        try:
            dump = read_snapshot(path)
        except SnapshotDamaged as exc:
            raise DataDirRefused(path, f"the snapshot cannot be loaded: {exc.problem}") from None
        except OSError as exc:
            raise DataDirRefused(path, f"the snapshot cannot be read: {exc}") from None
        prev, last = tuple(dump[2]), tuple(dump[1])
        _fit_journal_to_snapshot(journal, path, prev, last)
        snapshot_end = last[1]
    _check_commit_index(journal, snapshot_end)


def _fit_journal_to_snapshot(journal, path: str, prev: tuple, last: tuple) -> None:
    count = len(journal)
    if count == 0 or (count >= 2 and tuple(journal[0]) == prev and tuple(journal[1]) == last):
        return
    indexes = journal._indexes
    first, end, last_index = indexes[0], indexes[-1], last[1]
    if end < last_index:
        return  # the snapshot covers the whole journal: pysyncobj replaces it by the snapshot's entries
    if first > last_index + 1:
        raise DataDirRefused(
            path,
            f"the snapshot ends at index {last_index} but the journal {journal.journal_path} starts at "
            f"index {first}: entries {last_index + 1}..{first - 1} are in neither (a snapshot older than "
            "the journal)",
        )
    if first == last_index + 1:
        kept_from = 0
    else:
        position = _position_of(indexes, last_index)
        entry = tuple(journal[position])
        if entry == last:
            kept_from = position + 1
        elif last_index <= journal.getRaftCommitIndex():
            raise DataDirRefused(
                path,
                f"the snapshot's last entry (index {last_index}, term {last[2]}) conflicts with the "
                f"committed entry at that index in the journal {journal.journal_path} (term {entry[2]})",
            )
        else:
            # A snapshot holds committed entries only, so a journal entry of another term at its index
            # was never committed (a follower's stale tail, superseded by the leader's snapshot that
            # was renamed into place just before the process died): it goes, as Raft's install does.
            log.warning("journal entries from index %d (term %d) conflict with the snapshot (term %d) "
                        "above the commit index: dropped", last_index, entry[2], last[2])
            kept_from = count
    journal._rewrite([prev, last] + [journal.entry_at(i) for i in range(kept_from, count)])
    journal.reconciled_with_snapshot = True
    log.warning("journal reconciled with the snapshot at index %d: kept %d later entries",
                last_index, count - kept_from)


def _position_of(indexes, index: int) -> int:
    guess = index - indexes[0]  # a journal's indexes are consecutive
    if 0 <= guess < len(indexes) and indexes[guess] == index:
        return guess
    return list(indexes).index(index)


def _check_commit_index(journal, snapshot_end: int) -> None:
    commit_index = journal.getRaftCommitIndex()
    journal_end = journal._indexes[-1] if len(journal) else 0
    held_end = max(journal_end, snapshot_end, 1)  # pysyncobj's fresh journal: commit index 1, entry 1 to come
    if commit_index > held_end:
        raise DataDirRefused(
            journal.journal_path,
            f"the commit index ({commit_index}) is beyond the last entry the journal and the snapshot "
            f"hold ({held_end}): committed entries are missing",
        )
