"""Every name and bound the state machine uses, once, with the reason it has its value.

Nothing here is read from a node's environment: a value that changes what `apply` does must be
the same on every replica, so it is either a constant of the code (this module) or it travels in
the command (`policy`, `maxPending`) or in replicated state (queue options).
"""

from __future__ import annotations

from typing import NamedTuple

# --- names shared with the API and the raft layer (docs/commands.md) ---------------------------

# The partition a push or a timer lands in when the client names none.
DEFAULT_PARTITION = "Default"
# The consumer group of a pop or an ack that names none ("queue mode": one group sees each message).
QUEUE_MODE_GROUP = "__QUEUE_MODE__"
# The consumer group of the DLQ rows a timer leaves after its last failed fire; it never had a
# group or a position in a partition, hence also offset -1.
TIMER_DLQ_GROUP = "__timer__"
TIMER_DLQ_OFFSET = -1

MS_PER_SECOND = 1000

# --- the fire of timers (defaults of `policy`; the command may override them) ------------------

# At most this many timers per tick entry: bounds the entry's apply time (~2.5 ms) so the Raft
# tick thread keeps heart-beating while a backlog drains.
MAX_FIRE_BATCH = 256
# At most this much payload per tick entry: bounds the memory of one apply and what the next
# snapshot has to carry in one go. At least one timer is always taken (see timers.py).
MAX_FIRE_BYTES = 4 * 1024 * 1024
# Permanent failures a timer survives before it is filed in the DLQ (docs/spec.md section 2; a
# node's QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS travels in the command's policy).
MAX_FIRE_ATTEMPTS = 5
# Backoff after a permanent failure: BACKOFF_MIN_MS * 2^(attempts-1), capped at BACKOFF_MAX_MS
# (1 s .. 60 s), so a broken payload costs at most a handful of entries before the DLQ.
BACKOFF_MIN_MS = 1000
BACKOFF_MAX_MS = 60_000
# Retry delay when the destination is over its maxSize: the consumer needs time to drain it.
TRANSIENT_BACKOFF_MS = 1000


class FirePolicy(NamedTuple):
    """The fire bounds in force for one entry (the command's `policy`, defaults filled in)."""

    fire_batch: int = MAX_FIRE_BATCH
    fire_max_bytes: int = MAX_FIRE_BYTES
    max_attempts: int = MAX_FIRE_ATTEMPTS
    backoff_min_ms: int = BACKOFF_MIN_MS
    backoff_max_ms: int = BACKOFF_MAX_MS
    transient_backoff_ms: int = TRANSIENT_BACKOFF_MS


DEFAULT_FIRE_POLICY = FirePolicy()

# Wire key -> (field name, smallest legal value). fireBatch and maxAttempts need at least 1 or
# nothing could ever fire or fail; the others may be 0.
POLICY_KEYS = {
    "fireBatch": ("fire_batch", 1),
    "fireMaxBytes": ("fire_max_bytes", 0),
    "maxAttempts": ("max_attempts", 1),
    "backoffMinMs": ("backoff_min_ms", 0),
    "backoffMaxMs": ("backoff_max_ms", 0),
    "transientBackoffMs": ("transient_backoff_ms", 0),
}

# --- reads ----------------------------------------------------------------------------------------

# Keyset listing of timers and fetch of records: the default page and its clamp (docs/spec.md section 2, "Peek and
# list"), so one read never walks a million rows.
LIST_LIMIT_DEFAULT = 100
LIST_LIMIT_MIN = 1
LIST_LIMIT_MAX = 1000

# An answer carries at most this many bytes of stored payloads and values (a message's payload, a
# KV value, a DLQ row's payload), however small its request: 300 gets of one large value, or a
# fetch of 64 x 1000 records, must not make a node build a gigabyte. Its JSON is about as large
# (base64 adds a third, each item a few hundred bytes of fields). An answer always carries at least
# one item, so nothing is out of reach: a pop or a DLQ page ends early, a read that cannot (a KV
# batch, a transaction, a fetch) is refused with 413 answer_too_large. A request body is at most
# 6 MiB, so no one stored item is near it.
MAX_ANSWER_BYTES = 16 * 1024 * 1024

# --- messages -------------------------------------------------------------------------------------

# A pop's `batch` is clamped to this: one pop entry's answer stays a few MiB at most.
MAX_POP_BATCH = 1000

# Acked messages of released leases remembered per tenant, so that a retried ack answers as its
# first attempt did (released.py); the oldest leases are forgotten first. At the bound it costs a
# few MiB of heap and at most 2 MiB of snapshot (docs/performance.md), and it covers several
# seconds of the pop+ack rate bench/queue_throughput sees: more than a client's request timeout
# plus a leader election. It must stay above MAX_POP_BATCH so the lease just released is always
# remembered whole.
MAX_REMEMBERED_SETTLEMENTS = 16_384

# How long a lease released by its acks stays remembered, from its release on the group clock
# (released.py): as long as a queue's default dedup window, in which a retried push is still
# answered `duplicate`. It only matters when acks are rare: under load the count above forgets
# first. Past it a retried ack answers `invalid_lease`, as for a lease nobody remembers.
ACK_RETRY_MEMORY_SECONDS = 3600

# Fire records kept per tenant, so a cancel or a peek after the fire answers where the message went
# (fired_memory.py); the oldest are forgotten first, and each at its queue's dedup window anyway.
# A record costs ~150 B of heap beyond its timerKey and ~12 B of compressed snapshot
# (bench/README.md, "The fired memory"): at the bound ~40 MB of heap and ~3 MB of snapshot per
# tenant. It holds a full default window (an hour) of fires at 72/s sustained; a larger burst keeps
# its latest 262,144 fires.
MAX_REMEMBERED_FIRES = 262_144

# Queue options and their defaults (docs/spec.md section 3, `configure`). Times are in seconds on the wire.
DEFAULT_QUEUE_OPTIONS: dict[str, object] = {
    "leaseTime": 300,
    "retryLimit": 3,
    "deadLetterQueue": True,
    "dedupWindowSeconds": 3600,
    "delayedProcessing": 0,
    "maxPayloadBytes": 1024 * 1024,
    "maxSize": 0,
    "retentionSeconds": 0,
    "encryptionEnabled": False,
}
# Integer options and their smallest legal value. A lease of 0 s would expire as it is taken; a
# payload limit of 0 would refuse every message.
QUEUE_INT_OPTION_MIN = {
    "leaseTime": 1,
    "retryLimit": 0,
    "dedupWindowSeconds": 0,
    "delayedProcessing": 0,
    "maxPayloadBytes": 1,
    "maxSize": 0,
    "retentionSeconds": 0,
}
QUEUE_BOOL_OPTIONS = frozenset({"deadLetterQueue", "encryptionEnabled"})
# Largest integer option value: keeps every derived instant (now + seconds * 1000) inside msgpack's
# 64-bit integers and every replica's arithmetic identical.
QUEUE_INT_OPTION_MAX = 2**40

# Lease extension bound (seconds): same reason as QUEUE_INT_OPTION_MAX.
MAX_LEASE_EXTEND_SECONDS = 2**40

# --- stored values and names ----------------------------------------------------------------------

# A KV value or a pushed JSON payload nests at most this deep (a scalar is 0, [] is 1, [[]] is 2),
# and a message payload is answered as JSON only up to it. A stored value has to
# round-trip through a log entry and a snapshot (msgpack refuses more than 1024 levels, and a
# snapshot holds a value a few levels down) and through every answer that reads it (orjson writes
# at most 255 levels; deeper ones fall back to the stdlib encoder, which runs out of recursion near
# 1000). 100 is deeper than real documents go (MongoDB's BSON stops at 100 too) and far from both.
# A payload given as bytes (payloadB64, a timer's) that decodes to deeper JSON is answered as
# payloadB64, like any payload that is not JSON.
MAX_JSON_DEPTH = 100
# A KV value's msgpack encoding (its stored form) is at most this many bytes: every value lives in
# memory on every replica and in every snapshot, and travels whole in each answer that reads it.
# The same ceiling as a timer's payload and a queue's default maxPayloadBytes.
MAX_KV_VALUE_BYTES = 1024 * 1024

# Names (a queue, partition, timerKey, txn, KV ns or key) are at most this many UTF-8 bytes:
# identities, not payloads; long enough for any real name, short enough that the indexes of them
# (the timer table, the due index, a dedup window) stay small and an answer listing 1000 of them
# stays a few MiB.
MAX_NAME_BYTES = 1024

# --- integer ranges ---------------------------------------------------------------------------------

# Every instant and integer the state keeps must pack into msgpack's 64-bit integers, or one
# command would make every later snapshot fail on every replica. So:
# the group clock (`now`) stays within 0..2^53 (also exact in any JSON client);
MAX_INSTANT_MS = 2**53
# a timer's delay within +-2^50 ms (35,000 years), so deliverAt stays far inside int64;
MAX_DELAY_MS = 2**50
# policy values within 0..2^40 (backoff doubling is capped by backoffMaxMs before it matters);
MAX_POLICY_VALUE = 2**40
# a KV counter within int64, and a TTL within QUEUE_INT_OPTION_MAX seconds.
KV_INT_MIN = -(2**63)
KV_INT_MAX = 2**63 - 1

# --- snapshot -------------------------------------------------------------------------------------

# Format 2 adds the fired memory (fired_memory.py) after the KV store; a format-1 snapshot
# restores with an empty one. Format 3 holds the timers as their stored entries (timer_wire.py),
# which also reads the columns of formats 1 and 2. Format 4 writes the same timers inline, as a
# stream (snapshot_codec.py).
SNAPSHOT_FORMAT_VERSION = 4
READABLE_SNAPSHOT_FORMATS = (1, 2, 3, 4)
# zstd level 1: a million timers compress in a fraction of a second; higher levels save little on
# msgpack of ids and cost seconds. Single-threaded so the bytes never depend on the machine.
SNAPSHOT_ZSTD_LEVEL = 1

# --- bounds that depend on each other, checked when the module loads ------------------------------

# The lease just released is always remembered whole (see MAX_REMEMBERED_SETTLEMENTS).
assert MAX_REMEMBERED_SETTLEMENTS > MAX_POP_BATCH, "remembered settlements must exceed a pop's batch"
# Every instant the state derives stays inside msgpack's int64: now + a delay, now + an option in ms.
assert MAX_INSTANT_MS + MAX_DELAY_MS < 2**63, "deliverAt must fit int64"
assert MAX_INSTANT_MS + QUEUE_INT_OPTION_MAX * MS_PER_SECOND < 2**63, "now + an option's ms must fit int64"
# The default policy is one a command may carry.
assert all(minimum <= getattr(DEFAULT_FIRE_POLICY, name) <= MAX_POLICY_VALUE
           for name, minimum in POLICY_KEYS.values()), "the default fire policy is out of range"
