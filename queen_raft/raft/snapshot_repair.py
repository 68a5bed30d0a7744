"""A leader whose snapshot file does not verify writes a new one from the state it holds in memory.

The leader sends its snapshot file to a follower whose next entry it has already compacted away (a
wiped or long-absent node). It never sends a file that does not verify (snapshot_writer.py), so
until the file is replaced that follower cannot catch up. pysyncobj replaces it only at the next
compaction, and its __tryLogCompaction skips a compaction whose index is the one already
serialized: a group that applies nothing new (an idle tenant, or one quiet right after its last
snapshot) would keep the damaged file, and the follower would stay behind, for as long as it stays
idle. The state in memory is intact (it was restored or built entry by entry, and a damaged file is
found only when it is read again), so the leader writes it anew at once: at the next tick it
forgets which index it last serialized and asks for a compaction, outside its turn. The follower's
next request then gets the new file. A rewrite whose writer fails (a full disk) is asked for again
after a pause (snapshot_writer.REWRITE_RETRY_S) for as long as the damaged file is the one in place.

Reads and writes pysyncobj 0.3.17's SyncObj.__lastSerializedEntry (tests/unit/test_raft_recipe_syncobj.py
pins the source this relies on).
"""

from __future__ import annotations

import logging
import time

from queen_raft.raft.compaction_turn import CompactionTurn

log = logging.getLogger(__name__)


def rewrite_if_damaged(syncobj, serializer, turn: CompactionTurn) -> bool:
    """On the tick thread: True if a rewrite of a damaged snapshot was asked for now."""
    if not getattr(serializer, "rewrite_wanted", False) or getattr(serializer, "writing", False):
        return False
    if time.monotonic() < getattr(serializer, "rewrite_not_before", 0.0):
        return False
    serializer.rewrite_wanted = False
    log.warning("the snapshot does not verify: writing a new one from the state in memory")
    # Without this, pysyncobj sees the same last applied index as the damaged file's and writes nothing.
    syncobj._SyncObj__lastSerializedEntry = None
    turn.force_next()
    syncobj.forceLogCompaction()
    return True


def install_snapshot_repair(syncobj, turn: CompactionTurn) -> None:
    """Check on each of the group's ticks (about every 50 ms) whether the snapshot needs rewriting."""
    serializer = syncobj._SyncObj__serializer
    syncobj.addOnTickCallback(lambda: rewrite_if_damaged(syncobj, serializer, turn))
