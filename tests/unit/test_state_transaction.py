"""Transactions: pushes, acks, kv and timers in one entry, all or nothing."""

from __future__ import annotations

import pytest

from queen_raft.state import TenantState

T0 = 1_700_000_000_000


def push_op(txn: str, queue: str = "q", payload: bytes = b"{}") -> dict:
    return {"type": "push", "queue": queue, "partition": "Default", "payload": payload,
            "transactionId": txn, "messageId": f"m-{txn}", "traceId": None, "encrypted": False}


def ack_op(offset: int, lease: str = "L1", status: str = "completed") -> dict:
    return {"type": "ack", "consumerGroup": None, "leaseId": lease, "partition": "Default",
            "offset": offset, "status": status}


def schedule(key: str, delay: int = 1000, txn: str | None = None) -> dict:
    return {"op": "schedule", "queue": "tq", "timerKey": key, "partition": "Default",
            "delayMs": delay, "txn": txn or f"t-{key}", "messageId": f"m-{key}",
            "payload": b"p", "payloadZstd": False, "encrypted": False}


def transaction(state: TenantState, now: int, operations=(), kv=(), timers=(),
                max_pending: int | None = None) -> dict:
    return state.apply({"op": "transaction", "now": now, "producerSub": "sub",
                        "maxPending": max_pending, "operations": list(operations),
                        "kv": list(kv), "timers": list(timers)})


def leased_state() -> TenantState:
    """A state with two messages in q, both leased under L1."""
    state = TenantState()
    state.apply({"op": "push", "now": T0, "producerSub": "s", "items": [
        {k: v for k, v in push_op(txn).items() if k != "type"} for txn in ("a", "b")]})
    state.apply({"op": "pop", "now": T0, "queue": "q", "partition": None, "consumerGroup": None,
                 "batch": 10, "leaseId": "L1", "autoAck": False})
    return state


def unchanged_but_clock(state: TenantState, now: int, run) -> dict:
    """Run a refused transaction and check it changed nothing but the clock."""
    twin = TenantState.restore(state.snapshot())
    twin.apply({"op": "barrier", "now": now})
    answer = run(state)
    assert answer["success"] is False
    assert state.snapshot() == twin.snapshot()
    return answer


def test_a_transaction_applies_every_part_in_one_entry():
    state = leased_state()
    answer = transaction(state, T0 + 1, operations=[push_op("c"), ack_op(0)],
                         kv=[{"op": "put", "ns": "n", "key": "k", "value": 1}],
                         timers=[schedule("x"), schedule("now", delay=0)])
    assert answer["success"] is True
    results = answer["results"]
    assert [results[0]["status"], results[0]["offset"]] == ["queued", 2]
    assert results[1] == {"index": 1, "success": True, "dlq": False}
    assert results[2]["version"] == 1
    assert [r["status"] for r in results[3:]] == ["scheduled", "scheduled"]
    assert [r["transactionId"] for r in state.fetch("tq", "Default", 0, 10)] == ["t-now"]
    assert state.peek_timer("tq", "x") is not None
    group = state.broker.queues["q"].partitions["Default"].groups["__QUEUE_MODE__"]
    assert group.cursor == 1
    assert state.counters()["billedMessages"] == 2 + 1 + 2


def test_rejected_ack_rolls_back_everything():
    state = leased_state()
    answer = unchanged_but_clock(state, T0 + 1, lambda s: transaction(
        s, T0 + 1, operations=[push_op("c"), ack_op(0, lease="wrong")],
        kv=[{"op": "put", "ns": "n", "key": "k", "value": 1}], timers=[schedule("x")]))
    assert (answer["reason"], answer["index"]) == ("rejected_ack", 1)


def test_the_same_message_acked_twice_in_one_transaction_is_rejected():
    state = leased_state()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[ack_op(0), ack_op(0, status="failed")]))
    assert (answer["reason"], answer["index"]) == ("rejected_ack", 1)


def test_an_expired_lease_is_rejected():
    state = leased_state()
    late = T0 + 300_000
    answer = unchanged_but_clock(state, late, lambda s: transaction(s, late, operations=[ack_op(0)]))
    assert answer["reason"] == "rejected_ack"


def test_a_duplicate_push_rolls_back_with_reason_duplicate():
    state = leased_state()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[ack_op(0), push_op("new"), push_op("a")]))
    assert (answer["reason"], answer["index"]) == ("duplicate", 2)


def test_two_pushes_of_one_txn_in_a_transaction_are_a_duplicate():
    state = TenantState()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[push_op("x"), push_op("x")]))
    assert (answer["reason"], answer["index"]) == ("duplicate", 1)


def test_payload_over_the_limit_is_too_large():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxPayloadBytes": 2}})
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[push_op("x", payload=b"123")]))
    assert answer["reason"] == "too_large"
    assert "payload_too_large" in answer["error"]


def test_pushes_past_max_size_are_too_large():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxSize": 1}})
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[push_op("x"), push_op("y")]))
    assert (answer["reason"], answer["index"]) == ("too_large", 1)
    assert "queue_full" in answer["error"]


def test_kv_precondition_rolls_back_with_the_index_in_the_whole_transaction():
    state = leased_state()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[push_op("c"), ack_op(1)],
        kv=[{"op": "put", "ns": "n", "key": "k", "value": 1},
            {"op": "check", "ns": "n", "key": "k", "expectedVersion": 7}]))
    assert (answer["reason"], answer["index"]) == ("kv_precondition", 3)


def test_timer_quota_rolls_back():
    state = TenantState()
    transaction(state, T0, timers=[schedule("a")])
    answer = unchanged_but_clock(state, T0, lambda s: transaction(
        s, T0, operations=[push_op("c")], timers=[schedule("b")], max_pending=1))
    assert answer["reason"] == "timers_quota_exceeded"


@pytest.mark.parametrize("parts", [
    {"operations": [{"type": "teleport"}]},
    {"operations": [{**push_op("x"), "payload": "str"}]},
    {"kv": [{"op": "nope", "ns": "n", "key": "k"}]},
    {"timers": [schedule("a"), schedule("a", txn="again")]},
])
def test_malformed_parts_are_bad_request(parts):
    state = TenantState()
    answer = unchanged_but_clock(state, T0, lambda s: transaction(s, T0, **parts))
    assert answer["reason"] == "bad_request"


def test_a_timer_due_in_the_transaction_sees_its_pushes_in_the_dedup_window():
    state = TenantState()
    answer = transaction(state, T0, operations=[push_op("shared", queue="tq")],
                         timers=[schedule("k", delay=0, txn="shared")])
    assert answer["success"] is True
    assert len(state.fetch("tq", "Default", 0, 10)) == 1
    assert state.counters()["fired"]["duplicate"] == 1
    assert state.peek_timer("tq", "k") is None


def test_an_ack_in_a_transaction_can_file_in_the_dlq():
    state = leased_state()
    answer = transaction(state, T0, operations=[ack_op(0, status="dlq")])
    assert answer["results"][0]["dlq"] is True
    assert len(state.dlq_list("q", 10)) == 1
