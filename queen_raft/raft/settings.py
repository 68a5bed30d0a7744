"""Settings of one tenant's Raft group, with the measured values as defaults.

Every number here was chosen by measuring pysyncobj under the failure it prevents; the comment
says which failure that is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from queen_raft.config import ELECTION_MAX_CEILING_S, HTTP_MAX_BODY_CEILING, Settings
from queen_raft.raft.fire_batch import FireBatchBounds

MiB = 1024 * 1024

# The node's settings with nothing set: RaftSettings' defaults are theirs, so a default lives in
# one place (config.py) whether a group is built by a node or directly (tests, benches).
_DEFAULTS = Settings()

# The largest entry we accept. An HTTP body is capped well below this by the API; an entry at or
# above appendEntriesBatchSizeBytes takes pysyncobj's chunked path, which corrupts entries
# (recipe section 1, cause 4), so the batch size must stay above it.
MAX_ENTRY_BYTES = 8 * MiB
APPEND_ENTRIES_BATCH_SIZE_BYTES = MAX_ENTRY_BYTES + MiB

# 4 MiB socket buffers: with 64-208 KiB buffers, 1 and 4 MiB entries caused elections in 3 of 4
# runs; with 4 MiB, none in 8 runs (recipe section 1). The kernel caps the request at
# net.core.wmem_max / rmem_max, which must be at least this.
SOCKET_BUFFER_BYTES = 4 * MiB

# pysyncobj's validate() requires connectionTimeout >= raftMaxTimeout; a dead peer is noticed by
# this timeout, so keep it small but above the election maximum.
CONNECTION_TIMEOUT_S = 3.5

# The largest frame a peer may send once its first frame proved the password. The largest frame a
# node itself sends is an append_entries message: pysyncobj fills one with entries until their bytes
# reach appendEntriesBatchSizeBytes, so it carries at most that plus one more entry
# (APPEND_ENTRIES_BATCH_SIZE_BYTES + MAX_ENTRY_BYTES = 17 MiB), plus pickling (about 16 B per
# entry), and Fernet's base64 makes the frame 4/3 of that. Snapshot chunks (pysyncobj's
# logCompactionBatchSize, 64 KiB) are far smaller. 64 MiB keeps room for ~2 million small entries
# in one message; a frame announcing more is refused (connection closed) before it is buffered.
MAX_PEER_FRAME_BYTES = 64 * MiB
# The largest frame before the password is proven: the handshake's frames are a 32-byte random key
# or the dialer's address (~200 B encrypted). A stranger can make a node buffer at most this much.
MAX_HANDSHAKE_FRAME_BYTES = 64 * 1024
# An inbound connection that has not completed the handshake (proven the password and named its
# node) this long after it was accepted is closed. A peer's handshake is one round trip (~1 ms);
# the rest is room for a loaded node. Config: raft_handshake_timeout_s.
HANDSHAKE_TIMEOUT_S = _DEFAULTS.raft_handshake_timeout_s
# Inbound connections still in their handshake, per group: past this the oldest is closed, so a
# flood of connections costs a bounded number of file descriptors and buffers. Peers (at most one
# connection each per group, redialled every connection_retry_s) stay far below it.
MAX_PENDING_HANDSHAKES = 64

# pysyncobj's own command queue. Our in-flight bound (max_in_flight) sits far below it, so a full
# queue (QUEUE_FULL) only happens if something bypasses propose().
COMMANDS_QUEUE_SIZE = 100_000

# pysyncobj compacts by entry count; with large entries the count alone lets the log (kept whole
# in RAM, journal offsets uint32 = 4 GiB) grow unbounded. Force a compaction past this many bytes.
LOG_COMPACTION_MAX_BYTES = 256 * MiB

# glibc's malloc keeps the pages a burst of writes freed (message buffers, decoded commands, dict
# tables the state outgrew) inside its heaps; malloc_trim(0) gives whole free pages back. Measured
# with three in-process groups after 200,000 timers in 256-op entries: 9.7 MB (16 B per timer per
# node) returned in 1.5 ms. The transport trims once a burst that appended at least
# HEAP_TRIM_AFTER_LOG_BYTES of log has been quiet for HEAP_TRIM_IDLE_S (trimming mid-burst would
# only give back pages the burst takes again), and at most every HEAP_TRIM_MIN_INTERVAL_S per process
# (one trim walks every arena, for all the groups of the process).
HEAP_TRIM_AFTER_LOG_BYTES = 4 * MiB
HEAP_TRIM_IDLE_S = 1.0
HEAP_TRIM_MIN_INTERVAL_S = 10.0

# Compaction also happens on time; 300 s is pysyncobj's default and bounds replay on restart.
LOG_COMPACTION_MIN_TIME_S = 300

# Bounds that depend on each other, checked when the module loads: a change to one that breaks the
# other stops every node and every test at once instead of failing under load.
# A call is one entry, and its entry is its body plus ids and framing: the body's ceiling stays below.
assert HTTP_MAX_BODY_CEILING < MAX_ENTRY_BYTES, "an HTTP body must fit in one Raft entry"
# An entry at or above the batch size takes pysyncobj's chunked path (see MAX_ENTRY_BYTES).
assert APPEND_ENTRIES_BATCH_SIZE_BYTES > MAX_ENTRY_BYTES, "an entry must never reach the append batch size"
# The largest append_entries frame a node sends (a full batch plus one entry, base64 by Fernet: 4/3)
# must pass a peer's frame cap, or replication of large entries would stall.
assert MAX_PEER_FRAME_BYTES > (APPEND_ENTRIES_BATCH_SIZE_BYTES + MAX_ENTRY_BYTES) * 4 // 3, \
    "the peer frame cap must hold a full append_entries message"
# config.py refuses an election_max_s above its ceiling so that pysyncobj's validate() (connection
# timeout >= election maximum) cannot fail later, inside a group.
assert ELECTION_MAX_CEILING_S == CONNECTION_TIMEOUT_S, "the election ceiling is the Raft connection timeout"


# RaftSettings field -> the Settings field it is derived from (every field but the fire policy).
SETTINGS_FIELDS = {
    "commit_timeout_ms": "commit_timeout_ms",
    "tick_ms": "timer_tick_ms",
    "min_gap_ms": "timer_min_gap_ms",
    "fire_batch_max": "timer_fire_batch_max",
    "fsync": "fsync",
    "election_min_s": "election_min_s",
    "election_max_s": "election_max_s",
    "append_entries_period_s": "append_entries_period_s",
    "leader_fallback_timeout_s": "leader_fallback_timeout_s",
    "connection_retry_s": "connection_retry_s",
    "max_in_flight": "max_in_flight",
    "log_compaction_min_entries": "log_compaction_min_entries",
    "log_compaction_log_to_snapshot_ratio": "log_compaction_log_to_snapshot_ratio",
    "password": "raft_password",
    "handshake_timeout_s": "raft_handshake_timeout_s",
}


@dataclass(frozen=True)
class RaftSettings:
    """What one tenant's group needs of the node's settings; `from_settings` derives it."""

    # A write's answer waits at most this long for commit + local apply (QUEEN_RAFT_COMMIT_TIMEOUT_MS).
    commit_timeout_ms: int = _DEFAULTS.commit_timeout_ms
    # The leader tick: never sleep longer than tick_ms (0 disables fires), never propose two ticks
    # closer than min_gap_ms (docs/spec.md section 2, QUEEN_RAFT_TIMER_TICK_MS / _MIN_GAP_MS).
    tick_ms: int = _DEFAULTS.timer_tick_ms
    min_gap_ms: int = _DEFAULTS.timer_min_gap_ms
    # The fire policy (Settings.fire_policy: bounds and backoff), carried in every tick command so
    # every replica applies the same batch and backs a failure off alike. Compared, not hashed (a
    # mapping is not hashable): RaftSettings stays usable as a key.
    fire_policy: Mapping[str, int] = field(default_factory=_DEFAULTS.fire_policy, hash=False)
    # During a backlog the leader doubles a tick's fireBatch up to this (raft/fire_batch.py); a
    # base batch above it is its own ceiling (no growth).
    fire_batch_max: int = _DEFAULTS.timer_fire_batch_max
    # "group": one journal flush per pysyncobj tick before a follower acknowledges and before the
    # leader counts itself; term/vote fsynced. "off": no fsync (survives kill -9, not power loss).
    fsync: str = _DEFAULTS.fsync
    # Election timing: new leader in ~0.3 s median after a leader kill (recipe section 5).
    election_min_s: float = _DEFAULTS.election_min_s
    election_max_s: float = _DEFAULTS.election_max_s
    # Heartbeats go only from the tick loop, so autoTickPeriod <= appendEntriesPeriod.
    append_entries_period_s: float = _DEFAULTS.append_entries_period_s
    # An isolated leader steps down after this (default 30 s would keep a stale leader).
    leader_fallback_timeout_s: float = _DEFAULTS.leader_fallback_timeout_s
    # A restarted peer is redialled after this (default 5 s delayed catch-up by seconds).
    connection_retry_s: float = _DEFAULTS.connection_retry_s
    # Calls in flight per group: beyond it propose() answers "busy" at once instead of queueing
    # (an unthrottled burst otherwise fills pysyncobj's queue and gets QUEUE_FULL replies).
    max_in_flight: int = _DEFAULTS.max_in_flight
    # FileJournal keeps every entry in RAM and has uint32 offsets: compact by count well before
    # large entries can fill 4 GiB (2000 x 1 MiB = 2 GiB worst case).
    log_compaction_min_entries: int = _DEFAULTS.log_compaction_min_entries
    # ...and not before the log holds this fraction of the last snapshot's bytes (compaction_turn.py).
    log_compaction_log_to_snapshot_ratio: float = _DEFAULTS.log_compaction_log_to_snapshot_ratio
    # Peer authentication (Fernet): the peer protocol is pickle, so an open port is remote code
    # execution. A node always has one (queen_raft.peer_password); TenantGroup refuses None off
    # loopback, and in-process tests on loopback may leave it out.
    password: str | None = None
    # An inbound Raft connection still in its handshake this long after accept is closed.
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    @classmethod
    def from_settings(cls, settings: Settings) -> RaftSettings:
        return cls(fire_policy=settings.fire_policy(),
                   **{name: getattr(settings, source) for name, source in SETTINGS_FIELDS.items()})

    def __post_init__(self) -> None:
        if self.fsync not in ("group", "off"):
            raise ValueError(f"fsync must be 'group' or 'off', got {self.fsync!r}")
        if self.tick_ms < 0 or self.min_gap_ms < 0:
            raise ValueError("tick_ms and min_gap_ms must be >= 0")
        if self.commit_timeout_ms <= 0:
            raise ValueError("commit_timeout_ms must be > 0")
        if self.max_in_flight <= 0:
            raise ValueError("max_in_flight must be > 0")
        if self.fire_policy.get("fireBatch", 1) <= 0 or self.fire_policy.get("fireMaxBytes", 1) <= 0:
            raise ValueError("the fire policy's fireBatch and fireMaxBytes must be > 0")
        if self.fire_batch_max <= 0:
            raise ValueError("fire_batch_max must be > 0")
        if not self.election_min_s > 3 * self.append_entries_period_s:
            # pysyncobj's validate() asserts this; say it in our words first.
            raise ValueError("election_min_s must exceed 3 x append_entries_period_s")
        if self.election_max_s < self.election_min_s:
            raise ValueError("election_max_s must be >= election_min_s")
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be > 0")
        if self.election_max_s > CONNECTION_TIMEOUT_S:
            raise ValueError(f"election_max_s must be <= {CONNECTION_TIMEOUT_S} (connection timeout)")

    @property
    def tick_policy(self) -> dict[str, int]:
        """The `policy` of a tick command (docs/commands.md), at the base fire batch: a copy the
        tick loop sets its adaptive `fireBatch` in."""
        return dict(self.fire_policy)

    @property
    def fire_batch_bounds(self) -> FireBatchBounds:
        base = self.fire_policy.get("fireBatch", _DEFAULTS.timer_fire_batch)
        return FireBatchBounds(base, max(base, self.fire_batch_max))
