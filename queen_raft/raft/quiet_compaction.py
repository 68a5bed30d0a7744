"""A snapshot once the log goes quiet after a burst, so a member at rest restarts from a recent one.

A member compacts every `log_compaction_min_entries` entries, at its own turn (compaction_turn.py),
so when writes stop its log holds anything from none to that many entries past its last snapshot,
and a restart replays them all before it serves: at 256 timers an entry, up to half a million
schedules. So when no entry has been applied for QUIET_S and the log holds at least
`threshold` applied entries past the snapshot, each member compacts once more.

The members still take turns, without any exchange: they see the same applied index and leader,
so they agree on an order (`CompactionTurn.quiet_place`: the followers first, the longest log
first) and start one `CompactionTurn.stagger_s` apart, a writer's duration. The first also waits
that long after its applied index entered the current turn, since the turn's owner may have
started its regular writer then. A member compacts once per quiet index: a log that does not move asks for nothing more, and
one that moves by less than `threshold` entries before going quiet again asks for nothing either,
so an idle group never compacts in a loop. Nor does a member ask while its own writer runs (a
regular one that started as the burst ended): pysyncobj would keep the request and start a second
writer right after the first.

The check runs on the group's tick thread (a pysyncobj tick callback, at most every 50 ms); asking
is pysyncobj's forceLogCompaction, which starts the writer at the next tick.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from queen_raft.raft.compaction_turn import CompactionTurn

log = logging.getLogger(__name__)

# No entry applied for this long: the burst is over.
QUIET_S = 0.5
# The tick callback looks at most this often: pysyncobj ticks on every message (under writes
# several times an entry), and a burst's end is a matter of QUIET_S; it then notices an apply and
# the quiet instant at most this much late.
QUIET_CHECK_INTERVAL_S = 0.05
# Entries applied past the snapshot worth a snapshot at rest: fewer replay in a small part of what
# the restore of a large state takes, and a trickle of writes does not set a writer off each time.
QUIET_MIN_ENTRIES = 64


@dataclass
class QuietCompaction:
    turn: CompactionTurn
    quiet_s: float = QUIET_S
    clock: Callable[[], float] = time.monotonic
    _applied: int = field(default=-1, repr=False)
    _leader: str | None = field(default=None, repr=False)
    _applied_at: float = field(default=0.0, repr=False)
    _turn_entered_at: float = field(default=0.0, repr=False)
    _done_at_index: int = field(default=-1, repr=False)

    @property
    def threshold(self) -> int:
        return max(2, min(QUIET_MIN_ENTRIES, self.turn.turn_entries // 4))

    def due_at(self, leader: str | None = None) -> float:
        """When this member compacts if the applied index stays where it is."""
        stagger = self.turn.stagger_s()
        start = max(self._applied_at + self.quiet_s, self._turn_entered_at + stagger)
        return start + self.turn.quiet_place(self._applied, leader) * stagger

    def should_compact(self, applied_index: int, entries_past_snapshot: int, leader: str | None = None,
                       writing: bool = False) -> bool:
        """Called on every tick with the group's leader (its address) as this member sees it and
        whether its own writer runs; True once per quiet index, when this member's time has come.

        A new leader reorders the members (followers first): the wait starts again, as after an
        entry, so that a member does not move ahead into a place whose writer already runs."""
        now = self.clock()
        if applied_index != self._applied or leader != self._leader:
            if self._applied < 0 or self.turn.turn_of(applied_index) != self.turn.turn_of(self._applied):
                self._turn_entered_at = now
            self._applied, self._applied_at, self._leader = applied_index, now, leader
            return False
        if writing or applied_index == self._done_at_index or entries_past_snapshot < self.threshold:
            return False
        if now < self.due_at(leader):
            return False
        self._done_at_index = applied_index
        return True


def _first_index(raft_log, applied: int) -> int:
    """The Raft index of the log's first entry (the snapshot's), without reading a command."""
    indexes = getattr(raft_log, "indexes", None)
    if indexes is not None:
        return indexes[0] if indexes else applied
    return raft_log[0][1] if len(raft_log) else applied


def install_quiet_compaction(syncobj, turn: CompactionTurn) -> QuietCompaction:
    """Check on the group's ticks (at most every QUIET_CHECK_INTERVAL_S); ask for a compaction (in turn) when the time has come."""
    quiet = QuietCompaction(turn)
    raft_log = syncobj._SyncObj__raftLog
    serializer = syncobj._SyncObj__serializer

    next_check_at = [-math.inf]

    def on_tick() -> None:
        now = quiet.clock()
        if now < next_check_at[0]:
            return
        next_check_at[0] = now + QUIET_CHECK_INTERVAL_S
        applied = syncobj.raftLastApplied
        past_snapshot = applied - _first_index(raft_log, applied)
        leader = syncobj._getLeader()
        writing = getattr(serializer, "writing", False)
        if quiet.should_compact(applied, past_snapshot, getattr(leader, "address", leader), writing):
            log.info("the log is quiet at index %d, %d entries past the snapshot: compacting", applied, past_snapshot)
            turn.force_next()
            syncobj.forceLogCompaction()

    syncobj.addOnTickCallback(on_tick)
    return quiet
