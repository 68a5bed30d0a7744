"""Messages: push, dedup window, pop, leases, ack, retries, DLQ, configure, retention, fetch."""

from __future__ import annotations

import pytest

from queen_raft.state import TenantState
from queen_raft.state.partition import RETENTION_TRIM_CHUNK

T0 = 1_700_000_000_000


def item(txn: str, queue: str = "q", partition: str = "Default", payload: bytes = b"{}",
         trace: str | None = None) -> dict:
    return {"queue": queue, "partition": partition, "payload": payload, "transactionId": txn,
            "messageId": f"m-{txn}", "traceId": trace, "encrypted": False}


def push(state: TenantState, now: int, *items: dict) -> list[dict]:
    return state.apply({"op": "push", "now": now, "producerSub": "sub", "items": list(items)})["results"]


def pop(state: TenantState, now: int, lease: str | None = "L1", queue: str = "q",
        partition: str | None = None, group: str | None = None, batch: int = 10,
        auto_ack: bool = False) -> dict:
    return state.apply({"op": "pop", "now": now, "queue": queue, "partition": partition,
                        "consumerGroup": group, "batch": batch, "leaseId": lease,
                        "autoAck": auto_ack})


def ack(state: TenantState, now: int, lease: str | None, *acks: dict,
        group: str | None = None) -> list[dict]:
    return state.apply({"op": "ack", "now": now, "consumerGroup": group, "leaseId": lease,
                        "acknowledgments": list(acks)})["results"]


def done(offset: int, status: str = "completed", partition: str = "Default") -> dict:
    return {"partition": partition, "offset": offset, "status": status}


def configure(state: TenantState, now: int, queue: str = "q", **options) -> dict:
    return state.apply({"op": "configure", "now": now, "queue": queue, "options": options,
                        "mode": "merge"})


# --- push ------------------------------------------------------------------------------------------

def test_push_appends_gapless_offsets_per_partition():
    state = TenantState()
    results = push(state, T0, item("a"), item("b"), item("c", partition="p2"), item("d"))
    assert [(r["partition"], r["offset"], r["status"]) for r in results] == \
        [("Default", 0, "queued"), ("Default", 1, "queued"), ("p2", 0, "queued"),
         ("Default", 2, "queued")]
    assert results[0] == {"index": 0, "messageId": "m-a", "transactionId": "a", "queue": "q",
                          "partition": "Default", "status": "queued", "offset": 0}
    assert state.fetch("q", "Default", 0, 10)[2]["transactionId"] == "d"
    assert state.counters()["pushedMessages"] == 4


def test_duplicate_answers_the_original_offset_and_message_id_within_one_command_too():
    state = TenantState()
    push(state, T0, item("a"))
    results = push(state, T0 + 5, {**item("a"), "messageId": "m-new"}, item("b"),
                   {**item("b"), "messageId": "m-b2"})
    assert [(r["status"], r["offset"], r["messageId"]) for r in results] == \
        [("duplicate", 0, "m-a"), ("queued", 1, "m-b"), ("duplicate", 1, "m-b")]
    assert len(state.fetch("q", "Default", 0, 10)) == 2


def test_dedup_is_per_partition():
    state = TenantState()
    results = push(state, T0, item("a"), item("a", partition="other"))
    assert [r["status"] for r in results] == ["queued", "queued"]


def test_dedup_window_expires_on_the_group_clock_and_the_index_is_pruned():
    state = TenantState()
    configure(state, T0, dedupWindowSeconds=10)
    push(state, T0, item("a"))
    assert push(state, T0 + 9_999, item("a"))[0]["status"] == "duplicate"
    assert push(state, T0 + 10_000, item("a"))[0] == {**push(state, T0 + 10_000, item("zz"))[0],
                                                      "index": 0, "messageId": "m-a",
                                                      "transactionId": "a", "offset": 1}
    partition = state.broker.queues["q"].partitions["Default"]
    push(state, T0 + 30_000, item("late"))
    assert set(partition.dedup) == {"late"}
    assert len(partition.dedup_expiry) == 1


def test_dedup_window_zero_keeps_no_entries():
    state = TenantState()
    configure(state, T0, dedupWindowSeconds=0)
    assert [r["status"] for r in push(state, T0, item("a"), item("a"))] == ["queued", "queued"]


def test_push_errors_are_per_item():
    state = TenantState()
    configure(state, T0, maxPayloadBytes=3, maxSize=2)
    results = push(state, T0, item("a", payload=b"1234"), item("b"), item("c"), item("d"))
    assert [(r["status"], r.get("error"), r["offset"]) for r in results] == [
        ("error", "payload_too_large", None), ("queued", None, 0), ("queued", None, 1),
        ("error", "queue_full", None)]
    assert state.counters()["billedMessages"] == 4


def test_dedup_is_checked_before_the_limits():
    state = TenantState()
    push(state, T0, item("a", payload=b"12345"))
    configure(state, T0, maxPayloadBytes=3)
    assert push(state, T0, item("a", payload=b"12345"))[0]["status"] == "duplicate"


def test_a_malformed_item_refuses_the_push_whole():
    state = TenantState()
    before = state.snapshot()
    answer = state.apply({"op": "push", "now": 0, "producerSub": "s",
                          "items": [item("a"), {**item("b"), "payload": "text"}]})
    assert (answer["error"], answer["index"]) == ("bad_request", 1)
    assert state.snapshot() == before


def test_trace_id_and_producer_sub_are_kept():
    state = TenantState()
    push(state, T0, item("a", trace="trace-1"))
    record = state.fetch("q", "Default", 0, 1)[0]
    assert (record["traceId"], record["producerSub"], record["createdAt"]) == ("trace-1", "sub", T0)


# --- pop and leases ------------------------------------------------------------------------------

def test_pop_leases_a_batch_from_the_cursor():
    state = TenantState()
    push(state, T0, item("a", payload=b"1"), item("b"), item("c"))
    answer = pop(state, T0 + 1, batch=2)
    assert answer["leaseId"] == "L1"
    assert answer["messages"][0] == {
        "transactionId": "a", "messageId": "m-a", "queue": "q", "partition": "Default",
        "offset": 0, "leaseId": "L1", "deliveryAttempt": 1, "payload": b"1", "createdAt": T0,
        "consumerGroup": "__QUEUE_MODE__", "encrypted": False, "traceId": None}
    assert [m["offset"] for m in answer["messages"]] == [0, 1]
    # The partition is leased for the group: nothing more to pop.
    assert pop(state, T0 + 2, lease="L2") == {"leaseId": None, "messages": []}
    assert state.deliverable("q") is False


def test_pop_on_an_empty_or_unknown_queue_is_empty():
    state = TenantState()
    assert pop(state, T0, queue="nope") == {"leaseId": None, "messages": []}
    assert state.deliverable("nope") is False


def test_pop_without_partition_takes_the_first_deliverable_by_name():
    state = TenantState()
    push(state, T0, item("z1", partition="zeta"), item("a1", partition="alpha"))
    assert pop(state, T0, lease="L1")["messages"][0]["partition"] == "alpha"
    assert pop(state, T0, lease="L2")["messages"][0]["partition"] == "zeta"
    assert pop(state, T0, lease="L3")["messages"] == []


def test_consumer_groups_have_their_own_cursors():
    state = TenantState()
    push(state, T0, item("a"))
    assert pop(state, T0, lease="L1", group="g1")["messages"][0]["consumerGroup"] == "g1"
    assert pop(state, T0, lease="L2", group="g2")["messages"][0]["offset"] == 0
    assert state.deliverable("q", None, "g3") is True


def test_expired_lease_redelivers_with_the_next_delivery_attempt():
    state = TenantState()
    configure(state, T0, leaseTime=5)
    push(state, T0, item("a"))
    pop(state, T0, lease="L1")
    assert pop(state, T0 + 4_999, lease="L2")["messages"] == []
    assert state.deliverable("q") is False
    state.apply({"op": "barrier", "now": T0 + 5_000})
    assert state.deliverable("q") is True
    again = pop(state, T0 + 5_000, lease="L2")
    assert (again["leaseId"], again["messages"][0]["deliveryAttempt"]) == ("L2", 2)
    assert ack(state, T0 + 5_001, "L1", done(0)) == [
        {"index": 0, "success": False, "error": "invalid_lease", "dlq": False}]
    assert ack(state, T0 + 5_001, "L2", done(0))[0]["success"] is True


def test_delayed_processing_hides_messages_until_created_at_plus_delay():
    state = TenantState()
    configure(state, T0, delayedProcessing=2)
    push(state, T0, item("a"))
    push(state, T0 + 1_000, item("b"))
    assert state.deliverable("q") is False
    assert pop(state, T0 + 1_999)["messages"] == []
    got = pop(state, T0 + 2_500, lease="L2")["messages"]
    assert [m["transactionId"] for m in got] == ["a"]


def test_auto_ack_advances_the_cursor_and_keeps_no_lease():
    state = TenantState()
    push(state, T0, item("a"), item("b"))
    answer = pop(state, T0, lease=None, batch=1, auto_ack=True)
    assert answer["leaseId"] is None and answer["messages"][0]["leaseId"] is None
    assert pop(state, T0, lease=None, auto_ack=True)["messages"][0]["transactionId"] == "b"
    assert pop(state, T0, lease=None, auto_ack=True)["messages"] == []


def test_pop_batch_is_bounded_and_validated():
    state = TenantState()
    assert pop(state, T0, batch=0)["error"] == "bad_request"
    assert pop(state, T0, lease=None)["error"] == "bad_request"
    push(state, T0, item("a"))
    pop(state, T0, lease="L1")
    assert state.apply({"op": "pop", "now": T0, "queue": "q", "partition": "x",
                        "consumerGroup": "g", "batch": 1, "leaseId": "L1",
                        "autoAck": False})["error"] == "bad_request"


# --- ack -------------------------------------------------------------------------------------------

def test_completed_advances_the_cursor_contiguously_and_out_of_order_acks_are_not_redelivered():
    state = TenantState()
    push(state, T0, item("a"), item("b"), item("c"))
    pop(state, T0, lease="L1", batch=3)
    assert ack(state, T0, "L1", done(2), done(0)) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": False}]
    group = state.broker.queues["q"].partitions["Default"].groups["__QUEUE_MODE__"]
    assert (group.cursor, group.settled) == (1, {2})
    ack(state, T0, "L1", {"partition": "Default", "transactionId": "b", "status": "completed"})
    assert (group.cursor, group.settled) == (3, set())
    assert pop(state, T0, lease="L2")["messages"] == []


def test_lease_is_released_when_every_message_is_settled():
    state = TenantState()
    push(state, T0, item("a"), item("b"))
    pop(state, T0, lease="L1", batch=1)
    ack(state, T0, "L1", done(0))
    assert "L1" not in state.broker.leases
    assert pop(state, T0, lease="L2")["messages"][0]["offset"] == 1


def test_ack_refusals_are_per_item():
    state = TenantState()
    push(state, T0, item("a"), item("b"), item("x", partition="p2"))
    pop(state, T0, lease="L1", partition="Default", batch=2)
    # The second item repeats the first with another status: refused, it was settled completed.
    results = ack(state, T0, "L1", done(0), done(0, "retry"), done(9), done(1, partition="p2"),
                  {"queue": "other", "partition": "Default", "offset": 1, "status": "completed"},
                  done(1))
    assert [r["success"] for r in results] == [True, False, False, False, False, True]
    assert {r.get("error") for r in results if not r["success"]} == {"invalid_lease"}
    assert ack(state, T0, "nope", done(0))[0]["error"] == "invalid_lease"
    assert ack(state, T0, None, done(0))[0]["error"] == "invalid_lease"


def test_ack_with_another_groups_lease_is_refused():
    state = TenantState()
    push(state, T0, item("a"))
    pop(state, T0, lease="L1", group="g1")
    assert ack(state, T0, "L1", done(0), group="g2")[0]["error"] == "invalid_lease"
    assert ack(state, T0, "L1", done(0))[0]["error"] == "invalid_lease"
    assert ack(state, T0, "L1", done(0), group="g1")[0]["success"] is True


def test_retry_redelivers_without_spending_a_retry():
    state = TenantState()
    configure(state, T0, retryLimit=0)
    push(state, T0, item("a"))
    for attempt in range(1, 4):
        message = pop(state, T0, lease=f"L{attempt}")["messages"][0]
        assert message["deliveryAttempt"] == attempt
        assert ack(state, T0, f"L{attempt}", done(0, "retry"))[0] == \
            {"index": 0, "success": True, "dlq": False}
    assert state.dlq_list("q", 10) == []


def test_failed_spends_retries_and_past_retry_limit_goes_to_the_dlq():
    state = TenantState()
    configure(state, T0, retryLimit=2)
    push(state, T0, item("a", payload=b"P"), item("b"))
    for attempt in range(1, 4):
        got = pop(state, T0 + attempt, lease=f"L{attempt}", batch=1)["messages"][0]
        assert (got["offset"], got["deliveryAttempt"]) == (0, attempt)
        result = ack(state, T0 + attempt, f"L{attempt}",
                     {**done(0, "failed"), "error": "boom"})[0]
        assert result == {"index": 0, "success": True, "dlq": attempt == 3}
    assert pop(state, T0 + 9, lease="L9")["messages"][0]["offset"] == 1
    row = state.dlq_list("q", 10)[0]
    assert (row["consumerGroup"], row["offset"], row["transactionId"], row["payload"],
            row["error"], row["attempts"]) == ("__QUEUE_MODE__", 0, "a", b"P", "boom", 3)


def test_dlq_status_files_at_once_and_replay_pushes_it_back():
    state = TenantState()
    push(state, T0, item("a", payload=b"P"))
    pop(state, T0, lease="L1")
    assert ack(state, T0, "L1", done(0, "dlq"))[0]["dlq"] is True
    row = state.dlq_list("q", 10)[0]
    answer = state.apply({"op": "dlq_replay", "now": T0 + 1, "dlqId": row["dlqId"],
                          "messageId": "m-replay"})
    assert answer == {"index": 0, "messageId": "m-replay", "transactionId": "m-replay",
                      "queue": "q", "partition": "Default", "status": "queued", "offset": 1}
    assert state.dlq_list("q", 10) == []
    assert state.fetch("q", "Default", 1, 1)[0]["payload"] == b"P"
    assert state.apply({"op": "dlq_replay", "now": T0, "dlqId": row["dlqId"],
                        "messageId": "m"})["error"] == "not_found"


def test_queue_without_dlq_drops_instead_of_filing():
    state = TenantState()
    configure(state, T0, retryLimit=0, deadLetterQueue=False)
    push(state, T0, item("a"))
    pop(state, T0, lease="L1")
    assert ack(state, T0, "L1", done(0, "failed"))[0] == {"index": 0, "success": True, "dlq": False}
    assert state.dlq_list("q", 10) == []
    assert pop(state, T0, lease="L2")["messages"] == []


def test_lease_extend_moves_expiry_from_now():
    state = TenantState()
    configure(state, T0, leaseTime=5)
    push(state, T0, item("a"))
    pop(state, T0, lease="L1")
    answer = state.apply({"op": "lease_extend", "now": T0 + 4_000, "leaseId": "L1", "seconds": 10})
    assert answer == {"ok": True, "leaseId": "L1", "expiresAt": T0 + 14_000}
    assert pop(state, T0 + 13_000, lease="L2")["messages"] == []
    assert ack(state, T0 + 13_999, "L1", done(0))[0]["success"] is True
    assert state.apply({"op": "lease_extend", "now": T0, "leaseId": "L1",
                        "seconds": 10})["error"] == "invalid_lease"


def test_lease_extend_of_an_expired_lease_is_refused():
    state = TenantState()
    configure(state, T0, leaseTime=1)
    push(state, T0, item("a"))
    pop(state, T0, lease="L1")
    assert state.apply({"op": "lease_extend", "now": T0 + 1_000, "leaseId": "L1",
                        "seconds": 5})["error"] == "invalid_lease"


# --- configure, retention, fetch -----------------------------------------------------------------

def test_configure_merge_and_replace():
    state = TenantState()
    answer = configure(state, T0, leaseTime=60, maxSize=5)
    assert answer["queue"] == "q"
    assert (answer["options"]["leaseTime"], answer["options"]["maxSize"],
            answer["options"]["retryLimit"]) == (60, 5, 3)
    merged = configure(state, T0, retryLimit=9)["options"]
    assert (merged["leaseTime"], merged["retryLimit"]) == (60, 9)
    replaced = state.apply({"op": "configure", "now": T0, "queue": "q",
                            "options": {"maxSize": 1}, "mode": "replace"})["options"]
    assert (replaced["leaseTime"], replaced["retryLimit"], replaced["maxSize"]) == (300, 3, 1)


@pytest.mark.parametrize("options", [
    {"bogus": 1}, {"leaseTime": 0}, {"leaseTime": "5"}, {"retryLimit": True},
    {"deadLetterQueue": 1}, {"maxPayloadBytes": 0}, {"maxSize": -1}, {"retentionSeconds": 2**41},
])
def test_configure_refuses_unknown_options_and_bad_values(options):
    state = TenantState()
    configure(state, T0, leaseTime=60)
    answer = configure(state, T0, **options)
    assert answer["error"] == "bad_request"
    assert state.queue_options("q")["leaseTime"] == 60


def test_retention_trims_old_consumed_messages_but_offsets_never_reuse():
    state = TenantState()
    configure(state, T0, retentionSeconds=1)
    count = RETENTION_TRIM_CHUNK + 10
    for start in range(0, count, 500):
        push(state, T0, *(item(f"t{i}") for i in range(start, min(start + 500, count))))
    # Nobody consumed them yet: nothing is dropped however old.
    push(state, T0 + 10_000, item("late-1"))
    assert state.fetch("q", "Default", 0, 1)[0]["offset"] == 0
    pop(state, T0 + 10_000, lease=None, batch=1000, auto_ack=True)
    pop(state, T0 + 10_000, lease=None, batch=1000, auto_ack=True)
    answer = push(state, T0 + 10_000, item("late-2"))
    assert answer[0]["offset"] == count + 1
    first = state.fetch("q", "Default", 0, 1)[0]["offset"]
    assert first >= RETENTION_TRIM_CHUNK
    assert state.fetch("q", "Default", count, 5)[-1]["transactionId"] == "late-2"


def test_fetch_reads_by_offset_with_a_clamped_limit():
    state = TenantState()
    push(state, T0, *(item(f"t{i}") for i in range(5)))
    assert [r["offset"] for r in state.fetch("q", "Default", 2, 2)] == [2, 3]
    assert [r["offset"] for r in state.fetch("q", "Default", 3, 0)] == [3]
    assert state.fetch("q", "nope", 0, 10) == [] and state.fetch("nope", "Default", 0, 10) == []
