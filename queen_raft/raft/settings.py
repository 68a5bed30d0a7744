"""Settings of one tenant's Raft group, with the measured values as defaults.

Every number here was chosen by measuring pysyncobj under the failure it prevents; the comment
says which failure that is.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024

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
HANDSHAKE_TIMEOUT_S = 5.0
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


@dataclass(frozen=True)
class RaftSettings:
    # A write's answer waits at most this long for commit + local apply (QUEEN_RAFT_COMMIT_TIMEOUT_MS).
    commit_timeout_ms: int = 5000
    # The leader tick: never sleep longer than tick_ms (0 disables fires), never propose two ticks
    # closer than min_gap_ms (docs/spec.md section 2, QUEEN_RAFT_TIMER_TICK_MS / _MIN_GAP_MS).
    tick_ms: int = 50
    min_gap_ms: int = 5
    # Fire bounds carried in the tick command so every replica applies the same batch.
    fire_batch: int = 256
    fire_max_bytes: int = 4 * MiB
    # How a failing fire backs off (QUEEN_SWEEPER_*): also in the tick command, for the same reason.
    fire_max_attempts: int = 5
    fire_backoff_min_ms: int = 1000
    fire_backoff_max_ms: int = 60_000
    fire_transient_backoff_ms: int = 1000
    # "group": one journal flush per pysyncobj tick before a follower acknowledges and before the
    # leader counts itself; term/vote fsynced. "off": no fsync (survives kill -9, not power loss).
    fsync: str = "group"
    # Election timing: new leader in ~0.3 s median after a leader kill (recipe section 5).
    election_min_s: float = 0.2
    election_max_s: float = 0.6
    # Heartbeats go only from the tick loop, so autoTickPeriod <= appendEntriesPeriod.
    append_entries_period_s: float = 0.05
    # An isolated leader steps down after this (default 30 s would keep a stale leader).
    leader_fallback_timeout_s: float = 2.5
    # A restarted peer is redialled after this (default 5 s delayed catch-up by seconds).
    connection_retry_s: float = 0.5
    # Calls in flight per group: beyond it propose() answers "busy" at once instead of queueing
    # (an unthrottled burst otherwise fills pysyncobj's queue and gets QUEUE_FULL replies).
    max_in_flight: int = 2048
    # FileJournal keeps every entry in RAM and has uint32 offsets: compact by count well before
    # large entries can fill 4 GiB (2000 x 1 MiB = 2 GiB worst case).
    log_compaction_min_entries: int = 2000
    # Peer authentication (Fernet): the peer protocol is pickle, so an open port is remote code
    # execution. A node always has one (queen_raft.peer_password); TenantGroup refuses None off
    # loopback, and in-process tests on loopback may leave it out.
    password: str | None = None
    # An inbound Raft connection still in its handshake this long after accept is closed.
    handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.fsync not in ("group", "off"):
            raise ValueError(f"fsync must be 'group' or 'off', got {self.fsync!r}")
        if self.tick_ms < 0 or self.min_gap_ms < 0:
            raise ValueError("tick_ms and min_gap_ms must be >= 0")
        if self.commit_timeout_ms <= 0:
            raise ValueError("commit_timeout_ms must be > 0")
        if self.max_in_flight <= 0:
            raise ValueError("max_in_flight must be > 0")
        if self.fire_batch <= 0 or self.fire_max_bytes <= 0:
            raise ValueError("fire_batch and fire_max_bytes must be > 0")
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
    def tick_policy(self) -> dict:
        return {
            "fireBatch": self.fire_batch,
            "fireMaxBytes": self.fire_max_bytes,
            "maxAttempts": self.fire_max_attempts,
            "backoffMinMs": self.fire_backoff_min_ms,
            "backoffMaxMs": self.fire_backoff_max_ms,
            "transientBackoffMs": self.fire_transient_backoff_ms,
        }
