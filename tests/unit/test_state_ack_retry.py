"""A retried ack is idempotent: the memory of leases released by their acks (state/released.py)."""

from __future__ import annotations

import msgpack
import zstandard

from queen_raft.state import TenantState, limits
from queen_raft.state.limits import MAX_POP_BATCH, MAX_REMEMBERED_SETTLEMENTS

T0 = 1_700_000_000_000


def item(txn: str, partition: str = "Default") -> dict:
    return {"queue": "q", "partition": partition, "payload": b"{}", "transactionId": txn,
            "messageId": f"m-{txn}", "traceId": None, "encrypted": False}


def push(state: TenantState, now: int, *txns: str) -> None:
    answer = state.apply({"op": "push", "now": now, "producerSub": "sub",
                          "items": [item(txn) for txn in txns]})
    assert all(r["status"] == "queued" for r in answer["results"])


def pop(state: TenantState, now: int, lease: str, batch: int = 10,
        group: str | None = None) -> list[int]:
    answer = state.apply({"op": "pop", "now": now, "queue": "q", "partition": "Default",
                          "consumerGroup": group, "batch": batch, "leaseId": lease,
                          "autoAck": False})
    return [m["offset"] for m in answer["messages"]]


def ack(state: TenantState, now: int, lease: str | None, *acks: dict,
        group: str | None = None) -> list[dict]:
    return state.apply({"op": "ack", "now": now, "consumerGroup": group, "leaseId": lease,
                        "acknowledgments": list(acks)})["results"]


def done(offset: int, status: str = "completed", **extra) -> dict:
    return {"partition": "Default", "offset": offset, "status": status, **extra}


def by_txn(txn: str, status: str = "completed") -> dict:
    return {"partition": "Default", "transactionId": txn, "status": status}


def group_of(state: TenantState, name: str = "__QUEUE_MODE__"):
    return state.broker.queues["q"].partitions["Default"].groups[name]


def released_state() -> TenantState:
    """Three messages; L1 took all three and its acks settled them (completed, completed, dlq)."""
    state = TenantState()
    push(state, T0, "a", "b", "c")
    assert pop(state, T0, "L1") == [0, 1, 2]
    assert ack(state, T0 + 1, "L1", done(0), by_txn("b")) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": False}]
    assert ack(state, T0 + 2, "L1", done(2, "dlq")) == [{"index": 0, "success": True, "dlq": True}]
    assert "L1" not in state.broker.leases
    return state


# --- the retry of the first attempt -------------------------------------------------------------

def test_a_retried_ack_after_release_answers_as_the_first_and_changes_nothing():
    state = released_state()
    image, counters = state.snapshot(), state.counters()
    # The client lost the answer of the ack that released L1 and sends it again, at the same now
    # (the clock is in the image) and then later, by offset and by transactionId.
    assert ack(state, T0 + 2, "L1", done(2, "dlq")) == [{"index": 0, "success": True, "dlq": True}]
    assert state.snapshot() == image
    assert ack(state, T0 + 50, "L1", done(0), by_txn("b"), by_txn("c", "dlq")) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": False},
        {"index": 2, "success": True, "dlq": True}]
    # Nothing moved: cursor, DLQ rows, counters (acks are not billed; a retry is no new ack).
    assert state.counters() == counters
    assert group_of(state).cursor == 3
    assert len(state.dlq_list("q", 10)) == 1
    assert state.broker.pushed == 3 and state.billed == 3
    restored_at_same_clock = TenantState.restore(image)
    restored_at_same_clock.clock = state.clock
    assert state.snapshot() == restored_at_same_clock.snapshot()


def test_a_retry_with_another_status_is_refused_with_what_it_was_settled_as():
    state = released_state()
    image = state.snapshot()
    assert ack(state, T0 + 2, "L1", done(0, "retry"), done(2, "completed"), done(1)) == [
        {"index": 0, "success": False, "error": "invalid_lease", "dlq": False,
         "message": "already settled as completed"},
        {"index": 1, "success": False, "error": "invalid_lease", "dlq": False,
         "message": "already settled as dlq"},
        {"index": 2, "success": True, "dlq": False}]
    assert state.snapshot() == image


def test_a_failed_ack_that_filed_in_the_dlq_answers_dlq_again_and_files_nothing_more():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"retryLimit": 0}})
    push(state, T0, "a")
    pop(state, T0, "L1")
    first = ack(state, T0, "L1", done(0, "failed", error="boom"))
    assert first == [{"index": 0, "success": True, "dlq": True}]
    assert ack(state, T0 + 1, "L1", done(0, "failed", error="boom")) == first
    assert len(state.dlq_list("q", 10)) == 1
    assert group_of(state).failures == {}


def test_an_item_the_released_lease_never_covered_or_of_another_group_queue_partition_is_refused():
    state = released_state()
    plain = {"success": False, "error": "invalid_lease", "dlq": False}
    results = ack(state, T0 + 3, "L1", done(3), by_txn("zz"), done(0, partition="other"),
                  {**done(0), "queue": "other"})
    assert results == [{"index": i, **plain} for i in range(4)]
    assert ack(state, T0 + 3, "L1", done(0), group="g1") == [{"index": 0, **plain}]
    assert ack(state, T0 + 3, "L-other", done(0)) == [{"index": 0, **plain}]


def test_a_pop_cannot_reuse_the_id_of_a_remembered_lease():
    state = released_state()
    push(state, T0, "d")
    answer = state.apply({"op": "pop", "now": T0 + 3, "queue": "q", "partition": "Default",
                          "consumerGroup": None, "batch": 1, "leaseId": "L1", "autoAck": False})
    assert answer == {"error": "bad_request", "message": "leaseId already in use"}


# --- what is never remembered -------------------------------------------------------------------

def test_an_expired_lease_stays_invalid_lease_even_for_what_it_acked_before_expiring():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"leaseTime": 1}})
    push(state, T0, "a", "b")
    pop(state, T0, "L1")
    assert ack(state, T0 + 10, "L1", done(0))[0]["success"] is True
    # L1 expires with offset 1 unsettled: it was not released by its acks, so nothing is kept.
    plain = {"success": False, "error": "invalid_lease", "dlq": False}
    assert ack(state, T0 + 1_000, "L1", done(0)) == [{"index": 0, **plain}]
    assert ack(state, T0 + 1_000, "L1", done(1)) == [{"index": 0, **plain}]
    assert len(state.broker.released) == 0


def test_a_redelivered_message_is_settled_by_its_new_lease_only():
    state = TenantState()
    push(state, T0, "a")
    pop(state, T0, "L1")
    # `retry` releases L1 (every message acked) and leaves the message for the next pop.
    assert ack(state, T0, "L1", done(0, "retry"))[0]["success"] is True
    assert pop(state, T0 + 1, "L2") == [0]
    # The old lease cannot complete it: refused, saying what L1 settled it as.
    assert ack(state, T0 + 2, "L1", done(0)) == [
        {"index": 0, "success": False, "error": "invalid_lease", "dlq": False,
         "message": "already settled as retry"}]
    # Its own retry answers as before and changes nothing: L2 still holds the message.
    image = state.snapshot()
    assert ack(state, T0 + 2, "L1", done(0, "retry")) == [{"index": 0, "success": True, "dlq": False}]
    assert state.snapshot() == image
    assert group_of(state).lease.lease_id == "L2" and group_of(state).cursor == 0
    assert ack(state, T0 + 3, "L2", done(0)) == [{"index": 0, "success": True, "dlq": False}]
    assert group_of(state).cursor == 1


def test_a_message_redelivered_after_its_lease_expired_is_not_acked_by_the_old_lease():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"leaseTime": 1}})
    push(state, T0, "a")
    pop(state, T0, "L1")
    assert pop(state, T0 + 1_000, "L2") == [0]
    assert ack(state, T0 + 1_001, "L1", done(0))[0]["error"] == "invalid_lease"
    assert group_of(state).cursor == 0


def test_a_retried_ack_on_a_lease_still_live_answers_as_the_first_and_changes_nothing():
    # One pop of a batch, one ack per message (the SDK's consumer loop): the first ack's answer is
    # lost while the lease still holds the other messages, and the client sends it again.
    state = TenantState()
    push(state, T0, "a", "b", "c")
    pop(state, T0, "L1")
    assert ack(state, T0, "L1", done(0)) == [{"index": 0, "success": True, "dlq": False}]
    assert ack(state, T0, "L1", done(1, "dlq")) == [{"index": 0, "success": True, "dlq": True}]
    image = state.snapshot()
    assert ack(state, T0, "L1", done(0), by_txn("b", "dlq")) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": True}]
    assert state.snapshot() == image
    assert ack(state, T0, "L1", done(0, "failed")) == [
        {"index": 0, "success": False, "error": "invalid_lease", "dlq": False,
         "message": "already settled as completed"}]
    assert state.snapshot() == image and "L1" in state.broker.leases
    # A second item of one request naming a message the first settled is the same repeat.
    assert ack(state, T0, "L1", done(2), done(2)) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": False}]
    assert "L1" in state.broker.released.by_id


def test_a_lease_that_expired_answers_no_retry_even_for_what_it_settled_while_live():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"leaseTime": 1}})
    push(state, T0, "a", "b")
    pop(state, T0, "L1")
    assert ack(state, T0, "L1", done(0))[0]["success"] is True
    assert ack(state, T0 + 1_000, "L1", done(0))[0]["error"] == "invalid_lease"


# --- the bound ----------------------------------------------------------------------------------

def release_leases(state: TenantState, sizes: list[int], first: int = 0) -> list[str]:
    """Push, pop and complete one lease per size, in order, named L<first>...; their ids."""
    lease_ids = []
    for number, size in enumerate(sizes, first):
        lease_id = f"L{number}"
        push(state, T0, *(f"{lease_id}-{k}" for k in range(size)))
        offsets = pop(state, T0, lease_id, batch=size)
        assert len(offsets) == size
        assert all(r["success"] for r in ack(state, T0, lease_id, *map(done, offsets)))
        lease_ids.append(lease_id)
    return lease_ids


def test_the_bound_forgets_the_oldest_released_leases_whole(monkeypatch):
    monkeypatch.setattr(limits, "MAX_REMEMBERED_SETTLEMENTS", 4)
    state = TenantState()
    release_leases(state, [1, 2, 1])
    assert list(state.broker.released.order) == ["L0", "L1", "L2"]
    assert state.broker.released.settlements == 4
    # L3 (2 messages) takes the total to 6: L0 then L1 go, oldest first, whole.
    release_leases(state, [2], first=3)
    assert list(state.broker.released.order) == ["L2", "L3"]
    assert state.broker.released.settlements == 3
    assert ack(state, T0, "L0", done(0))[0]["error"] == "invalid_lease"
    assert ack(state, T0, "L2", done(3))[0]["success"] is True


def test_the_memory_never_grows_past_its_bound_at_full_pop_batches():
    state = TenantState()
    leases = MAX_REMEMBERED_SETTLEMENTS // MAX_POP_BATCH + 2
    push(state, T0, *(f"t{k}" for k in range(leases * MAX_POP_BATCH)))
    for number in range(leases):
        offsets = pop(state, T0, f"L{number}", batch=MAX_POP_BATCH)
        ack(state, T0, f"L{number}", *map(done, offsets))
        assert state.broker.released.settlements <= MAX_REMEMBERED_SETTLEMENTS
    remembered = state.broker.released
    assert remembered.settlements == (MAX_REMEMBERED_SETTLEMENTS // MAX_POP_BATCH) * MAX_POP_BATCH
    assert remembered.settlements == sum(len(r.settled_as) for r in remembered.by_id.values())
    assert "L0" not in remembered.by_id and f"L{leases - 1}" in remembered.by_id
    assert ack(state, T0, "L0", done(0))[0]["error"] == "invalid_lease"
    assert ack(state, T0, f"L{leases - 1}", done(leases * MAX_POP_BATCH - 1))[0]["success"]


def test_a_released_lease_is_forgotten_when_its_memory_window_ends_on_the_group_clock():
    window = limits.ACK_RETRY_MEMORY_SECONDS * 1000
    state = released_state()  # L1 released at T0 + 2
    assert ack(state, T0 + 2 + window - 1, "L1", done(0))[0]["success"] is True
    assert ack(state, T0 + 2 + window, "L1", done(0)) == [
        {"index": 0, "success": False, "error": "invalid_lease", "dlq": False}]
    # The next release drops it from the memory (and the count) for good.
    push(state, T0 + 2 + window, "d")
    pop(state, T0 + 2 + window, "L2")
    ack(state, T0 + 2 + window, "L2", done(3))
    assert list(state.broker.released.order) == ["L2"] and state.broker.released.settlements == 1
    # A proposer whose clock runs behind does not bring it back: the group clock never goes back.
    assert ack(state, T0, "L1", done(0))[0]["error"] == "invalid_lease"


# --- snapshot -----------------------------------------------------------------------------------

def test_snapshot_and_restore_keep_the_memory_and_a_live_lease_s_settlements():
    state = TenantState()
    push(state, T0, "a", "b", "c", "d")
    pop(state, T0, "L1", batch=2)
    ack(state, T0, "L1", done(0), done(1, "failed"))  # released
    pop(state, T0, "L2", batch=2)  # offsets 1 (redelivered) and 2
    ack(state, T0, "L2", done(2))  # L2 still live, holding offset 1
    image = state.snapshot()
    restored = TenantState.restore(image)
    assert restored.snapshot() == image
    assert ack(restored, T0 + 1, "L1", done(1, "failed")) == [
        {"index": 0, "success": True, "dlq": False}]
    # L2's first ack was made before the snapshot; its release after the restore remembers it.
    ack(restored, T0 + 1, "L2", done(1))
    assert ack(restored, T0 + 2, "L2", done(2), by_txn("b")) == [
        {"index": 0, "success": True, "dlq": False}, {"index": 1, "success": True, "dlq": False}]
    # The same entries on the original give the same bytes.
    ack(state, T0 + 1, "L1", done(1, "failed"))
    ack(state, T0 + 1, "L2", done(1))
    ack(state, T0 + 2, "L2", done(2), by_txn("b"))
    assert state.snapshot() == restored.snapshot()


def test_a_snapshot_from_before_the_memory_restores_with_nothing_remembered():
    state = TenantState()
    push(state, T0, "a", "b")
    pop(state, T0, "L1", batch=1)
    ack(state, T0, "L1", done(0))
    pop(state, T0, "L2", batch=1)
    wire = msgpack.unpackb(zstandard.ZstdDecompressor().decompressobj().decompress(state.snapshot()), raw=False,
                           strict_map_key=False)
    broker = wire[6]
    del broker[3]  # the released leases
    for queue in broker[2]:
        for partition in queue[2]:
            for _name, cursor in partition[5]:
                if cursor[4] is not None:
                    del cursor[4][3]  # a live lease's settlements
    old = zstandard.ZstdCompressor().compress(msgpack.packb(wire, use_bin_type=True))
    restored = TenantState.restore(old)
    assert len(restored.broker.released) == 0
    assert ack(restored, T0, "L1", done(0))[0]["error"] == "invalid_lease"
    assert ack(restored, T0, "L2", done(1))[0]["success"] is True


# --- transactions -------------------------------------------------------------------------------

def transaction(state: TenantState, now: int, operations: list[dict], kv: list[dict]) -> dict:
    return state.apply({"op": "transaction", "now": now, "producerSub": "sub",
                        "operations": operations, "kv": kv, "timers": []})


def test_a_retried_transaction_is_refused_by_its_remembered_ack_and_applies_nothing_twice():
    state = TenantState()
    push(state, T0, "a")
    pop(state, T0, "L1")
    operations = [{"type": "ack", "consumerGroup": None, "leaseId": "L1", **done(0)}]
    kv = [{"op": "incr", "ns": "saga", "key": "steps", "by": 1}]
    assert transaction(state, T0, operations, kv)["success"] is True
    assert state.kv_get("saga", "steps")["value"] == 1
    image = state.snapshot()
    assert transaction(state, T0, operations, kv) == {
        "success": False, "reason": "rejected_ack", "index": 0,
        "error": "already settled as completed under this lease"}
    assert state.snapshot() == image
    assert state.kv_get("saga", "steps")["value"] == 1
    # The standalone ack route answers the same retry as the first did.
    assert ack(state, T0, "L1", done(0)) == [{"index": 0, "success": True, "dlq": False}]
    # A lease nobody remembers keeps the old text.
    answer = transaction(state, T0, [{**operations[0], "leaseId": "L9"}], kv)
    assert (answer["reason"], answer["error"]) == ("rejected_ack",
                                                   "the lease does not cover this message")
