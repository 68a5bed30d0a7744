"""A fixed history of commands whose state a snapshot fixture was taken of (see
test_state_snapshot_stream.py): timers in three queues (a NUL in a key, a non-default partition, a
txn other than the key, a retried timer), messages popped and acked, kv, and fired timers."""

from __future__ import annotations

T0 = 1_700_000_000_000


def _schedule(queue: str, key: str, delay: int, txn: str, partition: str = "Default") -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "partition": partition,
            "delayMs": delay, "txn": txn, "messageId": f"m-{key}", "payload": f"body {key}".encode(),
            "payloadZstd": False, "encrypted": False}


def history() -> list[dict]:
    ops = [_schedule("orders", f"o{i:03d}", 60_000 + (i * 7919) % 5000, f"o{i:03d}") for i in range(120)]
    ops += [_schedule("mail", f"m{i}", 1000 * (i % 5), f"txn-{i}", "p2") for i in range(30)]
    ops += [_schedule("nul", "a\x00b", 90_000, "a\x00b"), _schedule("nul", "a", 90_000, "x")]
    return [
        {"op": "configure", "now": T0, "queue": "mail", "options": {"leaseTime": 2, "retryLimit": 1}},
        {"op": "timers", "now": T0, "producerSub": "alice", "maxPending": None, "ops": ops},
        {"op": "push", "now": T0 + 1, "producerSub": "bob", "items": [
            {"queue": "mail", "partition": "Default", "payload": b"m", "transactionId": f"p{i}",
             "messageId": f"mp{i}", "traceId": None, "encrypted": False} for i in range(4)]},
        {"op": "tick", "now": T0 + 2500, "policy": {"fireBatch": 8}},
        {"op": "pop", "now": T0 + 2501, "queue": "mail", "partition": None, "consumerGroup": None,
         "batch": 3, "leaseId": "L1", "autoAck": False},
        {"op": "ack", "now": T0 + 2502, "consumerGroup": None, "leaseId": "L1", "acknowledgments": [
            {"partition": "Default", "offset": 0, "status": "completed"}]},
        {"op": "kv", "now": T0 + 2503, "ops": [{"op": "put", "ns": "n", "key": "a", "value": [1, 2]}]},
        {"op": "timers", "now": T0 + 2504, "producerSub": "alice", "maxPending": None, "ops": [
            {"op": "cancel", "queue": "orders", "timerKey": "o007", "txn": None}]},
    ]
