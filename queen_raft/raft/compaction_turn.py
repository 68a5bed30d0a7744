"""Whose turn it is to write a snapshot: the members of a group take turns by log index.

pysyncobj starts a log compaction (a forked snapshot writer) once the log holds
`log_compaction_min_entries` entries. The members of a group apply the same entries at nearly the
same time, so left alone all of them fork at once, again and again. Each writer is a child whose
copy-on-write image grows to about the state's size: it touches every pending timer's object (its
reference count), and the kernel copies each page it touches. Three members on one machine (a
test or bench cluster, or containers packed on one host) then need up to three more states' worth
of memory at the same moment; on separate machines the whole group still stalls on its encodes
together (each writer takes a core).

So the members take turns. The log is cut into turns of `min_entries // members` entries, and the
member of rank r (its address's place among the group's addresses, sorted) starts a writer only
while the applied index is in a turn t with t mod members == r, and once its log holds more than
`compaction_min_entries` entries (pysyncobj's threshold): all the other members' turns and half a
turn. Each member thus compacts once every `min_entries` entries, as before, at the start of its
own turn: under a steady load the writers start a turn apart, and overlap only when one runs
longer than a turn. A threshold of one turn would let a member that started at its turn's start be
ready again before that turn ends: pysyncobj counts the entries appended and not yet applied in
its log, so the log passes a turn's length a few entries before the applied index leaves the turn,
and the member would start a second writer then, next to the one the next member starts at its
turn's start. The half turn of margin absorbs those entries. A restarted member replays what its
log held since its last snapshot: about `min_entries` entries, as before. The turns follow the
log, not a clock, so they hold on any machines without any exchange between them.

A log that does not move (an idle group, compacted on time every 300 s) leaves the turn where it
is: a member that has waited MAX_WAIT_S for its turn starts anyway. A single-member group never
waits, and keeps `min_entries` as its threshold. A compaction asked for explicitly
(TenantGroup.force_log_compaction) does not wait for the turn either.

When the log goes quiet after a burst, the members compact once more (quiet_compaction.py), one
after the other in `quiet_place` order, a writer's duration (`stagger_s`) apart.

A log that is small next to the state is not worth a snapshot yet (`log_worth_a_snapshot`). A
writer's work grows with the state (it encodes all of it), while what a snapshot saves, the replay
of the log after a restart, grows with the log. Under a steady pop + ack load with messages
retained, 2,000 entries of acknowledgements are a few MiB against a state of tens of MiB, and the
writers took about a quarter of the cluster's CPU. So a member also waits, before its turn counts,
until its log's commands hold at least `log_to_snapshot_ratio` of its last snapshot's bytes (the
rule Redis applies to its AOF rewrite, `auto-aof-rewrite-percentage`): the writers' work per byte
of log stays bounded, and so does the replay next to the restore it follows. Large entries (256
schedules each) pass it long before `min_entries`, so their compactions are as before. A
compaction asked for explicitly (quiet, repair, TenantGroup) and a log of
LOG_WORTH_A_SNAPSHOT_BYTES do not wait for it. A ratio of 0 turns it off.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from queen_raft.raft.settings import LOG_COMPACTION_MAX_BYTES

# The longest a member defers a snapshot for its turn; longer than a turn at any load that
# compacts often, short against the 300 s time-based compaction.
MAX_WAIT_S = 60.0
# A log this long is worth a snapshot whatever the state's size: it bounds the replay after a
# restart of a large state (at ten million timers half a snapshot is about 100 MiB of schedules,
# seconds of replay) while a pop + ack load next to a state of tens of MiB still waits for half.
LOG_WORTH_A_SNAPSHOT_BYTES = 64 * 1024 * 1024
# CompactionTurn._answer: start now; decline (nothing changes); decline and start the wait for the
# turn; the wait ran out, start now.
_START, _DECLINE, _BEGIN_WAIT, _WAIT_OVER = "start", "decline", "begin wait", "wait over"
# The gap between two members' writers when the log is quiet: this member's last writer's duration
# times WRITER_MARGIN (the members hold the same state, so theirs take about as long), at least
# MIN_STAGGER_S; DEFAULT_STAGGER_S before this process has run a writer.
WRITER_MARGIN = 1.25
MIN_STAGGER_S = 0.5
DEFAULT_STAGGER_S = 2.0

_lock = threading.Lock()
_turns: dict[str, CompactionTurn] = {}


@dataclass
class CompactionTurn:
    rank: int
    members: int
    turn_entries: int
    max_wait_s: float = MAX_WAIT_S
    clock: callable = time.monotonic
    _waiting_since: float | None = field(default=None, repr=False)
    _forced: bool = field(default=False, repr=False)
    # How long this member's last snapshot writer ran, fork to publish (snapshot_writer.py).
    writer_seconds: float | None = None
    # The members' addresses, sorted: a member's rank is its place here.
    addresses: tuple[str, ...] = ()
    # The log's bytes of commands and the path of this member's snapshot (construction.py sets
    # them once the journal exists); without them every log is worth a snapshot.
    log_bytes: Callable[[], int | None] | None = None
    snapshot_path: str | None = None
    log_to_snapshot_ratio: float = 0.0

    def force_next(self) -> None:
        self._forced = True

    @property
    def forced(self) -> bool:
        """Whether the next writer was asked for explicitly and has not started yet."""
        return self._forced

    @classmethod
    def of(cls, self_addr: str, addrs: list[str], min_entries: int) -> CompactionTurn:
        members = sorted(set(addrs) | {self_addr})
        # pysyncobj requires a threshold of at least 2 entries.
        return cls(members.index(self_addr), len(members), max(2, min_entries // len(members)),
                   addresses=tuple(members))

    def compaction_min_entries(self, min_entries: int) -> int:
        """pysyncobj's logCompactionMinEntries for this member: the other members' turns and half a
        turn (see the module docstring), or the setting alone."""
        if self.members == 1:
            return min_entries
        return max(2, (self.members - 1) * self.turn_entries + self.turn_entries // 2)

    def turn_of(self, applied_index: int) -> int:
        return applied_index // self.turn_entries

    def quiet_place(self, applied_index: int, leader: str | None = None) -> int:
        """This member's place (0 first) among the members compacting a log quiet at this index.

        The followers go before the leader: a follower's restart is the one that must be quick
        (the group keeps serving meanwhile), while the leader's is a failover anyway. Among them,
        the owner of the next turn goes first: it compacted two turns ago, so its log is the
        longest (and a restart would replay the most); the owner of the current turn, which
        compacted at this turn's start, goes last."""
        owner = self.turn_of(applied_index) % self.members
        leader_rank = self.addresses.index(leader) if leader in self.addresses else -1
        order = sorted(range(self.members), key=lambda rank: (rank == leader_rank, (rank - owner - 1) % self.members))
        return order.index(self.rank)

    def stagger_s(self) -> float:
        """The time one member's writer is given before the next member's starts."""
        if self.writer_seconds is None:
            return DEFAULT_STAGGER_S
        return max(MIN_STAGGER_S, WRITER_MARGIN * self.writer_seconds)

    def log_worth_a_snapshot(self) -> bool:
        """Whether the log holds enough next to the last snapshot to be worth writing a new one."""
        if self.log_bytes is None or self.snapshot_path is None or self.log_to_snapshot_ratio <= 0:
            return True
        log_bytes = self.log_bytes()
        if log_bytes is None or log_bytes >= min(LOG_WORTH_A_SNAPSHOT_BYTES, LOG_COMPACTION_MAX_BYTES):
            return True
        try:
            snapshot_bytes = os.stat(self.snapshot_path).st_size
        except OSError:
            return True  # no snapshot yet (or none readable): the repair path owns a damaged one
        return log_bytes >= self.log_to_snapshot_ratio * snapshot_bytes

    def declines_without_change(self, applied_index: int) -> bool:
        """Whether may_start(applied_index) would answer False now without changing anything:
        the log not worth a snapshot yet, or a wait for the turn already started and not run out."""
        return self._answer(applied_index) == _DECLINE

    def may_start(self, applied_index: int) -> bool:
        """Whether a snapshot at this applied index may start now (called on each refusal's retry)."""
        answer = self._answer(applied_index)
        if answer == _START:
            self._waiting_since, self._forced = None, False
            return True
        if answer == _BEGIN_WAIT:
            self._waiting_since = self.clock()
        elif answer == _WAIT_OVER:
            self._waiting_since = None
            return True
        return False

    def _answer(self, applied_index: int) -> str:
        if not self._forced and not self.log_worth_a_snapshot():
            return _DECLINE
        if self._forced or self.members == 1 or (applied_index // self.turn_entries) % self.members == self.rank:
            return _START
        if self._waiting_since is None:
            return _BEGIN_WAIT
        if self.clock() - self._waiting_since >= self.max_wait_s:
            return _WAIT_OVER
        return _DECLINE


def register_turn(full_dump_file: str, turn: CompactionTurn) -> None:
    """Before the group's SyncObj is built (its serializer looks the turn up by the file's path)."""
    with _lock:
        _turns[os.path.abspath(full_dump_file)] = turn


def force_next_turn(full_dump_file: str) -> None:
    turn = turn_of(full_dump_file)
    if turn is not None:
        turn.force_next()


def turn_of(full_dump_file: str) -> CompactionTurn | None:
    with _lock:
        return _turns.get(os.path.abspath(full_dump_file))
