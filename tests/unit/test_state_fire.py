"""The fire: tick order, bounds, the push path, failures, backoff and the timer DLQ."""

from __future__ import annotations

import zstandard

from queen_raft.state import TenantState
from queen_raft.state.timers import T_DUE_AT, T_RETRY

T0 = 1_700_000_000_000


def schedule(queue: str, key: str, delay: int, txn: str | None = None, payload: bytes = b"body",
             partition: str = "Default", zstd: bool = False) -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "partition": partition,
            "delayMs": delay, "txn": txn or f"txn-{key}", "messageId": f"mid-{key}",
            "payload": payload, "payloadZstd": zstd, "encrypted": False}


def timers(state: TenantState, now: int, *ops: dict, sub: str = "sub-1") -> dict:
    return state.apply({"op": "timers", "now": now, "producerSub": sub, "maxPending": None,
                        "ops": list(ops)})


def tick(state: TenantState, now: int, **policy) -> dict:
    command = {"op": "tick", "now": now}
    if policy:
        command["policy"] = policy
    return state.apply(command)


def txns(state: TenantState, queue: str, partition: str = "Default") -> list[str]:
    return [record["transactionId"] for record in state.fetch(queue, partition, 0, 1000)]


def test_tick_fires_nothing_before_deliver_at():
    state = TenantState()
    timers(state, T0, schedule("q", "k", 100))
    answer = tick(state, T0 + 99)
    assert answer == {"fired": 0, "appended": 0, "duplicate": 0, "failed": 0, "dlq": 0,
                      "lagsMs": [], "firedByQueue": {}, "moreDue": False, "nextDueAt": T0 + 100}
    assert txns(state, "q") == []


def test_fired_message_carries_txn_minted_message_id_and_the_schedulers_sub():
    state = TenantState()
    timers(state, T0, schedule("q", "k", 100, txn="t1", payload=b"\x01\x02", partition="p"),
           sub="alice")
    answer = tick(state, T0 + 130)
    assert answer == {"fired": 1, "appended": 1, "duplicate": 0, "failed": 0, "dlq": 0,
                      "lagsMs": [30], "firedByQueue": {"q": 1}, "moreDue": False, "nextDueAt": None}
    assert state.fetch("q", "p", 0, 10) == [{
        "offset": 0, "transactionId": "t1", "messageId": "mid-k", "payload": b"\x01\x02",
        "createdAt": T0 + 130, "producerSub": "alice", "traceId": None, "encrypted": False}]
    assert state.peek_timer("q", "k") is None
    assert state.counters()["fired"] == {"appended": 1, "duplicate": 0, "failed": 0, "dlq": 0}
    assert state.counters()["pendingTimers"] == 0
    assert state.counters()["pushedMessages"] == 1
    assert state.counters()["billedMessages"] == 1


def test_fire_creates_the_queue_with_default_options():
    state = TenantState()
    assert state.queue_options("fresh") is None
    timers(state, T0, schedule("fresh", "k", 0))
    assert state.queue_options("fresh")["dedupWindowSeconds"] == 3600


def test_fire_order_is_due_at_then_queue_then_timer_key():
    state = TenantState()
    timers(state, T0, schedule("b", "2", 50), schedule("b", "1", 50), schedule("a", "9", 50),
           schedule("a", "0", 60), schedule("c", "0", 40))
    tick(state, T0 + 100, fireBatch=1)
    tick(state, T0 + 100, fireBatch=2)
    tick(state, T0 + 100, fireBatch=10)
    # One partition per queue; the order across queues shows in the fired counts per tick, the
    # order within a queue in its log.
    assert txns(state, "a") == ["txn-9", "txn-0"]
    assert txns(state, "b") == ["txn-1", "txn-2"]
    state2 = TenantState()
    timers(state2, T0, schedule("q", "z", 50, txn="z"), schedule("q", "y", 60, txn="y"),
           schedule("q", "x", 50, txn="x"))
    tick(state2, T0 + 100, fireBatch=1)
    assert txns(state2, "q") == ["x"]
    tick(state2, T0 + 100)
    assert txns(state2, "q") == ["x", "z", "y"]


def test_fire_order_across_queues_with_one_fire_per_tick():
    state = TenantState()
    timers(state, T0, schedule("b", "1", 50), schedule("a", "2", 50), schedule("a", "1", 70),
           schedule("c", "0", 40))
    order = []
    for _ in range(4):
        before = {q: len(txns(state, q)) for q in "abc"}
        tick(state, T0 + 100, fireBatch=1)
        order += [q for q in "abc" if len(txns(state, q)) > before[q]]
    assert order == ["c", "a", "b", "a"]


def test_batch_bound_leaves_more_due():
    state = TenantState()
    timers(state, T0, *(schedule("q", f"k{i:03d}", 10) for i in range(300)))
    first = tick(state, T0 + 10)
    assert (first["fired"], first["moreDue"], first["nextDueAt"]) == (256, True, T0 + 10)
    second = tick(state, T0 + 10)
    assert (second["fired"], second["moreDue"], second["nextDueAt"]) == (44, False, None)
    assert txns(state, "q") == [f"txn-k{i:03d}" for i in range(300)]


def test_byte_bound_stops_before_the_payload_that_would_pass_it():
    state = TenantState()
    timers(state, T0, *(schedule("q", f"k{i}", 10, payload=b"x" * 400) for i in range(5)))
    answer = tick(state, T0 + 10, fireMaxBytes=1000)
    assert (answer["fired"], answer["moreDue"]) == (2, True)


def test_byte_bound_always_takes_one_oversized_timer():
    state = TenantState()
    timers(state, T0, schedule("q", "big", 10, payload=b"x" * 5000), schedule("q", "small", 10))
    answer = tick(state, T0 + 10, fireMaxBytes=1000)
    assert (answer["fired"], answer["appended"], answer["moreDue"]) == (1, 1, True)
    assert txns(state, "q") == ["txn-big"]


def test_default_policy_bounds_are_256_timers_and_4_mib():
    state = TenantState()
    payload = b"x" * (1024 * 1024)
    timers(state, T0, *(schedule("q", f"k{i}", 10, payload=payload) for i in range(6)))
    assert tick(state, T0 + 10)["fired"] == 4


def test_a_schedule_already_due_fires_in_the_same_entry():
    state = TenantState()
    answer = timers(state, T0, schedule("q", "now", 0, txn="t0"),
                    schedule("q", "past", -500, txn="tp"), schedule("q", "later", 10))
    assert [r["status"] for r in answer["results"]] == ["scheduled"] * 3
    assert answer["results"][1]["deliverAt"] == T0 - 500
    # Fired in (dueAt, queue, timerKey) order: the past one first.
    assert txns(state, "q") == ["tp", "t0"]
    assert state.peek_timer("q", "now") is None
    assert state.next_due_at() == T0 + 10
    assert state.counters()["fired"]["appended"] == 2


def test_a_due_reschedule_fires_in_the_same_entry_with_the_new_txn():
    state = TenantState()
    timers(state, T0, schedule("q", "k", 5000, txn="old"))
    answer = timers(state, T0 + 1, {**schedule("q", "k", 0, txn="new"), "op": "reschedule"})
    assert answer["results"][0]["status"] == "rescheduled"
    assert txns(state, "q") == ["new"]


def test_the_tick_answers_its_fires_by_queue_whatever_their_result():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "small", "options": {"maxPayloadBytes": 4}})
    timers(state, T0, schedule("a", "k1", 10), schedule("b", "k2", 20), schedule("a", "k3", 30),
           schedule("small", "big", 40, payload=b"too large"), schedule("b", "later", 500))
    answer = tick(state, T0 + 100)
    assert answer["firedByQueue"] == {"a": 2, "b": 1, "small": 1}
    assert (answer["fired"], answer["appended"], answer["failed"]) == (4, 3, 1)
    assert sum(answer["firedByQueue"].values()) == answer["fired"]


def test_a_txn_in_the_dedup_window_appends_nothing_and_ends_the_timer():
    state = TenantState()
    state.apply({"op": "push", "now": T0, "producerSub": "s", "items": [
        {"queue": "q", "partition": "Default", "payload": b"first", "transactionId": "t1",
         "messageId": "m-push", "traceId": None, "encrypted": False}]})
    timers(state, T0, schedule("q", "k", 100, txn="t1"))
    answer = tick(state, T0 + 100)
    assert (answer["fired"], answer["duplicate"], answer["appended"]) == (1, 1, 0)
    assert answer["lagsMs"] == [0]
    assert txns(state, "q") == ["t1"]
    assert state.peek_timer("q", "k") is None
    assert state.counters()["fired"]["duplicate"] == 1


def test_after_the_dedup_window_the_same_txn_appends_again():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"dedupWindowSeconds": 1}})
    timers(state, T0, schedule("q", "a", 0, txn="t1"))
    timers(state, T0 + 999, schedule("q", "b", 0, txn="t1"))
    assert txns(state, "q") == ["t1"]
    timers(state, T0 + 1000, schedule("q", "c", 0, txn="t1"))
    assert txns(state, "q") == ["t1", "t1"]


def test_zstd_payload_is_decompressed_at_the_fire():
    state = TenantState()
    packed = zstandard.ZstdCompressor().compress(b"hello timers" * 10)
    timers(state, T0, schedule("q", "k", 10, payload=packed, zstd=True))
    assert state.peek_timer("q", "k")["payload"] == packed
    tick(state, T0 + 10)
    assert state.fetch("q", "Default", 0, 1)[0]["payload"] == b"hello timers" * 10


def test_permanent_failure_backs_off_doubling_to_the_cap_then_goes_to_the_dlq():
    state = TenantState()
    timers(state, T0, schedule("q", "bad", 0, payload=b"not zstd", zstd=True), sub="alice")
    now = T0
    waits = []
    for attempt in range(1, 5):
        peek = state.peek_timer("q", "bad")
        assert peek["attempts"] == attempt
        # A fixed text: the library's message could differ between replicas' versions.
        assert peek["lastError"] == "payload_zstd: the payload does not decompress"
        assert peek["deliverAt"] == T0
        waits.append(peek["dueAt"] - now)
        now = peek["dueAt"]
        assert tick(state, now - 1)["fired"] == 0
        answer = tick(state, now)
        assert answer["fired"] == 1
        assert answer["lagsMs"] == []
    assert waits == [1000, 2000, 4000, 8000]
    assert answer["dlq"] == 1 and answer["failed"] == 0
    assert state.peek_timer("q", "bad") is None
    rows = state.dlq_list("q", 10)
    assert len(rows) == 1
    row = rows[0]
    assert (row["consumerGroup"], row["offset"], row["transactionId"], row["messageId"],
            row["payload"], row["attempts"], row["producerSub"], row["timerKey"]) == \
        ("__timer__", -1, "txn-bad", "mid-bad", b"not zstd", 5, "alice", "bad")
    assert state.counters()["fired"] == {"appended": 0, "duplicate": 0, "failed": 4, "dlq": 1}
    assert txns(state, "q") == []


def test_backoff_is_capped_by_the_policy_maximum():
    state = TenantState()
    policy = {"maxAttempts": 10, "backoffMinMs": 1000, "backoffMaxMs": 3000}
    state.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
                 "policy": policy, "ops": [schedule("q", "bad", 0, payload=b"x", zstd=True)]})
    waits = []
    now = T0
    for _ in range(4):
        due = state.peek_timer("q", "bad")["dueAt"]
        waits.append(due - now)
        now = due
        tick(state, now, **policy)
    assert waits == [1000, 2000, 3000, 3000]


def test_payload_over_max_payload_bytes_is_a_permanent_failure():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxPayloadBytes": 4}})
    timers(state, T0, schedule("q", "big", 0, payload=b"12345"))
    peek = state.peek_timer("q", "big")
    assert (peek["attempts"], peek["lastError"], peek["dueAt"]) == (1, "payload_too_large", T0 + 1000)


def test_zstd_payload_that_decompresses_past_the_limit_is_a_permanent_failure():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxPayloadBytes": 100}})
    packed = zstandard.ZstdCompressor().compress(b"z" * 101)
    timers(state, T0, schedule("q", "bomb", 0, payload=packed, zstd=True))
    assert state.peek_timer("q", "bomb")["lastError"] == "payload_too_large"


def test_transient_failure_retries_after_1s_without_spending_an_attempt():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxSize": 1}})
    timers(state, T0, schedule("q", "first", 0))
    timers(state, T0, schedule("q", "second", 0))
    peek = state.peek_timer("q", "second")
    assert (peek["attempts"], peek["lastError"], peek["dueAt"]) == (0, "queue_full", T0 + 1000)
    for step in range(1, 8):
        answer = tick(state, T0 + 1000 * step)
        assert (answer["failed"], answer["dlq"]) == (1, 0)
    assert state.peek_timer("q", "second")["attempts"] == 0
    # The consumer drains the queue: the next try appends.
    state.apply({"op": "pop", "now": T0 + 7001, "queue": "q", "partition": None,
                 "consumerGroup": None, "batch": 1, "leaseId": None, "autoAck": True})
    assert tick(state, T0 + 8000)["appended"] == 1
    assert txns(state, "q") == ["txn-first", "txn-second"]


def test_a_timer_in_backoff_can_be_cancelled_or_rescheduled():
    state = TenantState()
    timers(state, T0, schedule("q", "a", 0, payload=b"junk", zstd=True),
           schedule("q", "b", 0, payload=b"junk", zstd=True))
    answer = timers(state, T0 + 1, {"op": "cancel", "queue": "q", "timerKey": "a", "txn": None},
                    {**schedule("q", "b", 0, txn="fixed", payload=b"ok"), "op": "reschedule"})
    assert [r["status"] for r in answer["results"]] == ["cancelled", "rescheduled"]
    assert txns(state, "q") == ["fixed"]
    assert state.next_due_at() is None


def test_dlq_replay_of_a_timer_row_is_refused():
    state = TenantState()
    state.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
                 "policy": {"maxAttempts": 1},
                 "ops": [schedule("q", "bad", 0, payload=b"junk", zstd=True)]})
    row = state.dlq_list("q", 10)[0]
    answer = state.apply({"op": "dlq_replay", "now": T0, "dlqId": row["dlqId"], "messageId": "m2"})
    assert answer["error"] == "dlq_replay_refused"
    assert len(state.dlq_list("q", 10)) == 1


def test_fire_counts_zero_billed_messages():
    state = TenantState()
    timers(state, T0, schedule("q", "a", 0), schedule("q", "b", 10))
    tick(state, T0 + 10)
    assert state.counters()["billedMessages"] == 2


def test_bad_policy_is_refused():
    state = TenantState()
    assert tick(state, T0, fireBatch=0)["error"] == "bad_request"
    assert tick(state, T0, surprise=1)["error"] == "bad_request"


def test_a_huge_max_attempts_keeps_backing_off_at_the_cap():
    state = TenantState()
    policy = {"maxAttempts": 2**40, "backoffMinMs": 1000, "backoffMaxMs": 60_000}
    state.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
                 "policy": policy, "ops": [schedule("q", "bad", 0, payload=b"x", zstd=True)]})
    timer = state.timers.get("q", "bad")
    # As if it had failed that often (a timer is an immutable tuple: swap in the changed one).
    state.timers.remove(timer)
    timer = timer[:T_RETRY] + ((10_000_000, "failed", timer[T_DUE_AT]),) + timer[T_RETRY + 1:]
    state.timers.insert(timer)
    now = timer[T_DUE_AT]
    tick(state, now, **policy)
    assert state.peek_timer("q", "bad")["dueAt"] == now + 60_000


def test_a_zstd_payload_larger_than_one_read_chunk_decompresses_whole():
    from queen_raft.state.zstd_bounded import DECOMPRESS_CHUNK

    state = TenantState()
    body = bytes(range(256)) * (DECOMPRESS_CHUNK // 256 + 3)
    state.apply({"op": "configure", "now": T0, "queue": "q",
                 "options": {"maxPayloadBytes": len(body)}})
    timers(state, T0, schedule("q", "k", 0, payload=zstandard.ZstdCompressor().compress(body),
                               zstd=True))
    assert state.fetch("q", "Default", 0, 1)[0]["payload"] == body
