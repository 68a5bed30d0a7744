"""The pysyncobj binding: one Raft group per tenant. Knows nothing of HTTP.

`TenantGroup.propose(command)` replicates one command and answers its result; `read(fn)` runs fn on
the state after a shared read barrier; the group's leader runs the timer tick. See group.py.
"""

from queen_raft.raft.group import GroupUnavailable, TenantGroup
from queen_raft.raft.settings import RaftSettings

__all__ = ["GroupUnavailable", "RaftSettings", "TenantGroup"]
