"""What the API may call on a tenant's group: the seam between api/ and the Raft layer.

TenantGroup (group.py) is the implementation; the API's tests stand in for it with an in-process
fake of the same shape (tests/unit/test_api_fake_group.py). Anything else on the group
(leadership hooks, the tick loop, lifecycle) belongs to the node process, not to routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypedDict, TypeVar

if TYPE_CHECKING:
    from queen_raft.state import TenantState

T = TypeVar("T")


class GroupStatus(TypedDict):
    """This node's view of its group (GET /health and the metrics read it)."""

    role: str  # "leader", "follower" or "candidate"
    leader: str | None  # the leader's Raft address, None while there is none
    term: int
    commitIndex: int
    appliedIndex: int
    appendEntries: dict  # the leader's AppendEntries sends (leader_append.py)
    proposals: dict  # entries and commands this node proposed through its batcher
    raftMessages: dict  # Raft messages sent, and those left out as repeats (quiet_messages.py)
    diskFull: bool  # the journal cannot write: writes are refused with disk_full, reads go on
    loadError: str | None  # why the state could not be loaded (the node then refuses to start)
    journalFlush: dict | None  # fdatasync times (raft/flush_times.py); None for a journal that never flushes
    peerLinks: dict  # Raft address of each peer -> its link's frame and AEAD frame counts (peer_links.py)
    snapshotWriters: dict  # published, failed (since start), failing (in a row, 0 after a success)
    # Term and vote stores (stored_term.py): failed (since start), failing (the last one failed: this
    # member takes no newer term, vote or leader), failingSinceMs (unix ms) and lastError while failing
    termStore: dict


class GroupApi(Protocol):
    async def propose(self, command: dict) -> dict:
        """Replicate one command; its result as applied. Raises GroupUnavailable (may still
        commit: retry, writes are idempotent) or EntryTooLarge (never retry)."""
        ...

    async def read(self, fn: Callable[[TenantState], T]) -> T:
        """fn(state) after a read barrier: sees every write acknowledged before the call began.
        Raises GroupUnavailable."""
        ...

    def peek_local(self, fn: Callable[[TenantState], T]) -> T:
        """fn(state) on this replica as it is now, without a barrier: may be behind the leader."""
        ...

    def status(self) -> GroupStatus:
        ...

    def peers_apply(self, level: int) -> bool:
        """Whether every other member of the group applies the command forms of `level`
        (raft/command_forms.py); propose the older form when not."""
        ...
