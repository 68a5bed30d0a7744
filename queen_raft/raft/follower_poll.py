"""A follower that hears its leader does not also wake between heartbeats.

pysyncobj's tick thread runs one `_onTick` and then polls its sockets for at most autoTickPeriod
(50 ms, the heartbeat period). A follower wakes on each heartbeat and, its poll then timing out a
millisecond or two before the next heartbeat arrives, once more in between: about half of an idle
follower's ticks find nothing to do, each a full pass of the tick (commit scan, group-commit check,
compaction check, the transport's tick) and a poll syscall, on every group of every node.

While this node follows a known leader, the poll waits up to FOLLOWER_POLL_PERIODS periods instead,
and never past the election deadline, so a leader that goes silent is noticed exactly when stock
notices it: the deadline is checked at the top of the next tick, which the poll now ends at (stock
ends it up to a period later). Whatever arrives meanwhile (a heartbeat, an entry, a vote request,
a proposal's pipe notification) ends the poll at once, as before. What runs only on a tick (the
transport's housekeeping, connection retries, the journal's one-second save, the compaction check)
runs on each heartbeat's tick, at least as often as the heartbeat period while the leader is heard,
and at most FOLLOWER_POLL_PERIODS periods apart when it is not. A leader, a candidate and a follower
without a leader poll as stock does.

Overrides SyncObj._onTick (wrapped: only its timeToWait changes) and reads __raftState,
__raftLeader and __raftElectionDeadline of pysyncobj 0.3.17.
"""

from __future__ import annotations

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE

from queen_raft.raft.leader_append import CoalescingSyncObj

# At 2, a heartbeat at the period (each one resets the election deadline) ends every poll before
# its timeout, and one lost heartbeat still leaves a tick within two periods.
FOLLOWER_POLL_PERIODS = 2


def follower_poll_s(period_s: float, following: bool, until_election_s: float) -> float:
    """How long the tick thread polls: the stock period unless this node follows a known leader,
    then up to FOLLOWER_POLL_PERIODS periods, cut at the election deadline (never below the period,
    as stock never polls less)."""
    if not following or period_s <= 0:
        return period_s
    return max(period_s, min(FOLLOWER_POLL_PERIODS * period_s, until_election_s))


class FollowerPollSyncObj(CoalescingSyncObj):
    """CoalescingSyncObj whose follower polls up to its election deadline (see the module docstring)."""

    def _onTick(self, timeToWait=0.0):
        following = (self._SyncObj__raftState == _RAFT_STATE.FOLLOWER
                     and self._SyncObj__raftLeader is not None)
        until_election_s = self._SyncObj__raftElectionDeadline - monotonic_time() if following else 0.0
        super()._onTick(follower_poll_s(timeToWait, following, until_election_s))
