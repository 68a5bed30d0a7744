"""The pysyncobj binding: one Raft group per tenant. Knows nothing of HTTP.

`TenantGroup.propose(command)` replicates one command and answers its result; `read(fn)` runs fn on
the state after a shared read barrier (read_barrier.py); the group's leader runs the timer tick
(tick.py). See group.py.
"""

from queen_raft.raft.errors import EntryTooLarge, GroupUnavailable
from queen_raft.raft.group import TenantGroup
from queen_raft.raft.settings import MAX_ENTRY_BYTES, RaftSettings

__all__ = ["EntryTooLarge", "GroupUnavailable", "MAX_ENTRY_BYTES", "RaftSettings", "TenantGroup"]
