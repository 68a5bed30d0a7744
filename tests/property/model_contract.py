"""The reference model's contract (see timer_model.py): the queue option and fire policy defaults,
and, where the contract leaves a choice open, the choice as a named constant, so a disagreement
with the state is one line to find and one line to flip. Also the two rules every part of the
model reads: when an expiry is past, and the UTF-8 byte order of timer keys.
"""

DEFAULT_PARTITION = "Default"
QUEUE_MODE_GROUP = "__QUEUE_MODE__"
TIMER_DLQ_GROUP = "__timer__"

# Queue option defaults, docs/commands.md `configure`.
DEFAULT_QUEUE_OPTIONS = {
    "leaseTime": 300,
    "retryLimit": 3,
    "deadLetterQueue": True,
    "dedupWindowSeconds": 3600,
    "delayedProcessing": 0,
    "maxPayloadBytes": 1048576,
    "maxSize": 0,
    "retentionSeconds": 0,
    "encryptionEnabled": False,
}

# Fire policy defaults, docs/commands.md `policy`.
DEFAULT_POLICY = {
    "fireBatch": 256,
    "fireMaxBytes": 4194304,
    "maxAttempts": 5,
    "backoffMinMs": 1000,
    "backoffMaxMs": 60000,
    "transientBackoffMs": 1000,
}

# Contract choice: a dedup entry or a lease with expiry E is dead from clock == E on (the usual
# "expiresAt <= now means expired"). The contract says "window" and "expired" without the boundary.
EXPIRED_AT_EXACT_INSTANT = True

# Contract choice: the dedup check runs before the payload limit, so a txn already in the window
# answers `duplicate` (and a timer carrying it is done) even when its payload is over the queue's
# maxPayloadBytes. docs/commands.md names both checks but not their order; a retried push of an
# accepted message should be answered as the duplicate it is.
DEDUP_BEFORE_PAYLOAD_LIMIT = True

# Contract choice (broker.py): a lease remembers what it settled, live and once released by its
# acks, so an ack naming a settled message again answers from that memory. A released lease is
# remembered for ACK_RETRY_MEMORY_SECONDS after its release on the group clock; the state also
# bounds the memory at 16,384 messages, far beyond what one run releases, so the model keeps every
# released lease until its time is up.
RETRIED_ACK_ANSWERS_AS_THE_FIRST = True
ACK_RETRY_MEMORY_MS = 3_600_000

# Contract choice (fired_memory.py): a key's fire is remembered for the destination queue's
# dedupWindowSeconds from the fire (with the window in force at the fire), and dead at its end like
# a dedup entry; a window of 0 remembers nothing. The state also bounds it at MAX_REMEMBERED_FIRES
# (262,144) per tenant, far beyond what one run fires, so the model keeps every fire until it
# expires. A cancel that removes a pending timer forgets the key's earlier fire.
FIRES_REMEMBERED_FOR_THE_DEDUP_WINDOW = True

# Contract choice: the first delivery of a message has deliveryAttempt 1, each redelivery after an
# expired lease adds one.
FIRST_DELIVERY_ATTEMPT = 1

# Contract choice: a `timers` command fires, after its ops, only the timers it scheduled that are
# already due (all of them, in (dueAt, queue, timerKey) order, not bounded by fireBatch); timers
# that were due before the command wait for the next tick. "Schedules whose deliverAt <= groupNow
# fire inside this same entry".
IMMEDIATE_FIRE_ONLY_THIS_BATCH = True


def is_expired(expires_at, clock):
    if EXPIRED_AT_EXACT_INSTANT:
        return clock >= expires_at
    return clock > expires_at


def utf8_order(key):
    """timerKey order of list_timers: by the key's UTF-8 bytes."""
    return key.encode("utf-8")
