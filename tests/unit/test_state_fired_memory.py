"""The fired memory (queen_raft/state/fired_memory.py): after its fire, a cancel and a peek of a key
say where the message went for the destination queue's dedup window, within a count bound; the
memory is in the snapshot, and old journals and format-1 snapshots still load."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
import zstandard

from queen_raft.raft.replicated_state import decode_command
from queen_raft.state import TenantState, limits
from test_state_timers import T0, cancel, schedule, timers


def configure(state: TenantState, now: int, queue: str = "q", **options) -> None:
    assert "error" not in state.apply({"op": "configure", "now": now, "queue": queue, "options": options})


def fire_all(state: TenantState, now: int, policy: dict | None = None) -> dict:
    return state.apply({"op": "tick", "now": now, "policy": policy or {"fireBatch": 1000}})


def cancel_answer(state: TenantState, now: int, key: str, txn: str | None = None, queue: str = "q") -> dict:
    return timers(state, now, cancel(queue, key, txn))["results"][0]


def test_cancel_after_the_fire_names_the_fired_message():
    state = TenantState()
    state.apply({"op": "push", "now": T0, "items": [{"queue": "q", "partition": "eu", "payload": b"x",
                                                     "transactionId": "earlier", "messageId": "m0"}]})
    timers(state, T0, schedule("q", "k", delay=10, txn="fire-txn", partition="eu"))
    fire_all(state, T0 + 15)
    answer = cancel_answer(state, T0 + 20, "k", txn="sent-txn")
    assert answer == {"ok": False, "status": "fired", "queue": "q", "timerKey": "k", "txn": "fire-txn",
                      "partition": "eu", "offset": 1, "messageId": "mid-k-fire-txn", "firedAt": T0 + 15,
                      "requestTxn": "sent-txn"}
    [record] = state.fetch("q", "eu", 1, 1)
    assert (record["transactionId"], record["messageId"]) == ("fire-txn", "mid-k-fire-txn")
    assert state.fired_timer("q", "k") == {"status": "fired", "txn": "fire-txn", "partition": "eu", "offset": 1,
                                           "messageId": "mid-k-fire-txn", "firedAt": T0 + 15}
    assert state.peek_timer("q", "k") is None
    state.check_invariants()


def test_a_timer_due_at_its_schedule_fires_in_that_entry_and_is_remembered():
    state = TenantState()
    timers(state, T0, schedule("q", "now", delay=0, txn="t"))
    assert cancel_answer(state, T0, "now")["status"] == "fired"


def test_a_duplicate_fire_remembers_the_message_already_holding_its_txn():
    state = TenantState()
    state.apply({"op": "push", "now": T0, "items": [{"queue": "q", "partition": "Default", "payload": b"x",
                                                     "transactionId": "same", "messageId": "pushed"}]})
    timers(state, T0, schedule("q", "k", delay=10, txn="same"))
    assert fire_all(state, T0 + 10)["duplicate"] == 1
    answer = cancel_answer(state, T0 + 11, "k")
    assert (answer["status"], answer["offset"], answer["messageId"], answer["txn"]) == ("fired", 0, "pushed", "same")


def test_remembered_for_the_queues_dedup_window_from_the_fire_and_dead_at_its_end():
    state = TenantState()
    configure(state, T0, dedupWindowSeconds=5)
    timers(state, T0, schedule("q", "k", delay=10))
    fire_all(state, T0 + 10)
    configure(state, T0 + 11, dedupWindowSeconds=3600)  # the expiry was fixed at the fire
    assert cancel_answer(state, T0 + 10 + 4_999, "k")["status"] == "fired"
    state.apply({"op": "barrier", "now": T0 + 10 + 5_000})
    assert state.fired_timer("q", "k") is None
    assert cancel_answer(state, T0 + 10 + 5_000, "k")["status"] == "absent"
    fire_all(state, T0 + 10 + 5_000)
    assert len(state.fired_memory) == 0  # the tick trims what expired
    state.check_invariants()


def test_a_queue_without_a_dedup_window_remembers_no_fire():
    state = TenantState()
    configure(state, T0, dedupWindowSeconds=0)
    timers(state, T0, schedule("q", "k", delay=0))
    assert cancel_answer(state, T0, "k")["status"] == "absent"
    assert len(state.fired_memory) == 0


def test_a_timer_filed_in_the_dlq_answers_dead_lettered():
    state = TenantState()
    configure(state, T0, maxPayloadBytes=1)
    timers(state, T0, schedule("q", "poison", delay=0, txn="t-p", payload=b"too big"),
           max_pending=None)
    state.apply({"op": "tick", "now": T0 + 100_000, "policy": {"maxAttempts": 1}})
    [row] = state.dlq_list("q")
    answer = cancel_answer(state, T0 + 100_001, "poison")
    assert answer == {"ok": False, "status": "dead_lettered", "queue": "q", "timerKey": "poison", "txn": "t-p",
                      "partition": "Default", "dlqId": row["dlqId"], "messageId": "mid-poison-t-p",
                      "firedAt": T0 + 100_000, "requestTxn": None}


def test_a_key_pending_again_answers_pending_and_its_cancel_forgets_the_fire():
    state = TenantState()
    timers(state, T0, schedule("q", "k", delay=0, txn="first"))
    timers(state, T0 + 1, schedule("q", "k", delay=60_000, txn="second", op="reschedule"))
    assert state.peek_timer("q", "k")["txn"] == "second"
    cancelled = cancel_answer(state, T0 + 2, "k")
    assert (cancelled["ok"], cancelled["status"], cancelled["txn"]) == (True, "cancelled", "second")
    assert cancel_answer(state, T0 + 3, "k")["status"] == "absent"
    assert state.fired_timer("q", "k") is None
    state.check_invariants()


def test_a_second_fire_of_the_key_answers_instead_of_the_first():
    state = TenantState()
    timers(state, T0, schedule("q", "older", delay=0))
    timers(state, T0, schedule("q", "k", delay=0, txn="first"))
    timers(state, T0 + 1, schedule("q", "k", delay=0, txn="second"))
    answer = cancel_answer(state, T0 + 2, "k")
    assert (answer["txn"], answer["offset"], answer["firedAt"]) == ("second", 2, T0 + 1)
    # The superseded record keeps its place behind the older one, and leaves from the front.
    assert len(state.fired_memory) == 3
    state.check_invariants()
    fire_all(state, T0 + 3_600_000)  # older expires: it and k's first fire behind it leave
    assert len(state.fired_memory) == 1
    assert state.fired_timer("q", "k")["txn"] == "second"


def test_a_cancel_in_a_transaction_answers_the_same():
    state = TenantState()
    timers(state, T0, schedule("q", "k", delay=0, txn="t-k"))
    answer = state.apply({"op": "transaction", "now": T0 + 5, "timers": [cancel("q", "k", "mine")]})
    assert answer["success"] is True
    [result] = answer["results"]
    assert (result["status"], result["txn"], result["offset"], result["requestTxn"]) == ("fired", "t-k", 0, "mine")


def test_the_count_bound_forgets_the_oldest_fires_first(monkeypatch):
    monkeypatch.setattr(limits, "MAX_REMEMBERED_FIRES", 3)
    state = TenantState()
    for i in range(5):
        timers(state, T0 + i, schedule("q", f"k{i}", delay=0))
        state.check_invariants()
    assert [cancel_answer(state, T0 + 9, f"k{i}")["status"] for i in range(5)] == \
        ["absent", "absent", "fired", "fired", "fired"]
    assert len(state.fired_memory) == 3


def test_one_fire_over_the_bound_keeps_its_last_timers(monkeypatch):
    monkeypatch.setattr(limits, "MAX_REMEMBERED_FIRES", 2)
    state = TenantState()
    timers(state, T0, *(schedule("q", f"k{i}", delay=10) for i in range(4)))
    fire_all(state, T0 + 10)
    assert [state.fired_timer("q", f"k{i}") is not None for i in range(4)] == [False, False, True, True]
    state.check_invariants()


def test_snapshot_keeps_the_memory_and_a_restored_state_forgets_alike(monkeypatch):
    monkeypatch.setattr(limits, "MAX_REMEMBERED_FIRES", 4)
    state = TenantState()
    configure(state, T0, queue="short", dedupWindowSeconds=1)
    timers(state, T0, schedule("q", "a", delay=0), schedule("short", "b", delay=0))
    timers(state, T0 + 1, schedule("q", "a", delay=0, txn="again"), schedule("q", "c", delay=0))
    timers(state, T0 + 2, schedule("q", "d", delay=60_000))
    cancel_answer(state, T0 + 3, "d")  # nothing fired for d: forgets nothing
    restored = TenantState.restore(state.snapshot())
    assert restored.snapshot() == state.snapshot()
    restored.check_invariants()
    later = [{"op": "timers", "now": T0 + 2_000, "producerSub": "s", "maxPending": None,
              "ops": [schedule("q", "e", delay=0), schedule("q", "f", delay=0)]},
             {"op": "tick", "now": T0 + 3_000}]
    for command in later:
        assert state.apply(dict(command)) == restored.apply(dict(command))
    assert restored.snapshot() == state.snapshot()
    keys = [("q", "a"), ("short", "b"), ("q", "c"), ("q", "e"), ("q", "f")]
    assert [restored.fired_timer(*k) for k in keys] == [state.fired_timer(*k) for k in keys]
    assert restored.fired_timer("short", "b") is None and restored.fired_timer("q", "f") is not None


# Entries as the journal of the code before the fired memory holds them (msgpack of each command;
# the entry format did not change): a configure, three schedules, a tick firing two, two cancels.
OLD_JOURNAL = [bytes.fromhex(entry) for entry in (
    "84a26f70a9636f6e666967757265a36e6f77cf0000019b76daa800a57175657565a66f7264657273a76f7074696f6e73"
    "81b2646564757057696e646f775365636f6e647378",
    "85a26f70a674696d657273a36e6f77cf0000019b76daa800ab70726f6475636572537562a3737663aa6d617850656e64"
    "696e67c0a36f70739282a26f70ad7363686564756c655f726f7773a4726f77739299a66f7264657273a76f726465722f"
    "31a744656661756c740aa76f726465722f31d92430313933613162322d303030302d373030302d383030302d30303030"
    "3030303030303031c4077b226e223a317dc2c299a66f7264657273a76f726465722f32a265750aa574786e2d32d92430"
    "313933613162322d303030302d373030302d383030302d303030303030303030303032c4077b226e223a327dc2c28aa2"
    "6f70a87363686564756c65a57175657565a66f7264657273a874696d65724b6579a76f726465722f33a9706172746974"
    "696f6ea744656661756c74a764656c61794d73cdc350a374786ea574786e2d33a96d6573736167654964d92430313933"
    "613162322d303030302d373030302d383030302d303030303030303030303033a77061796c6f6164c4077b226e223a33"
    "7dab7061796c6f61645a737464c2a9656e63727970746564c2",
    "83a26f70a47469636ba36e6f77cf0000019b76daa80aa6706f6c69637981a9666972654261746368cd0100",
    "85a26f70a674696d657273a36e6f77cf0000019b76daa814ab70726f6475636572537562a3737663aa6d617850656e64"
    "696e67c0a36f70739284a26f70a663616e63656ca57175657565a66f7264657273a874696d65724b6579a76f72646572"
    "2f31a374786ec084a26f70a663616e63656ca57175657565a66f7264657273a874696d65724b6579a76f726465722f33"
    "a374786ea574786e2d33",
)]
# sha256 of msgpack(snapshot fields 1..7: clock, pause, billed, fire counts, timers, broker, kv)
# after OLD_JOURNAL, as the code before the fired memory computed it.
OLD_JOURNAL_STATE_SHA256 = "f9bb66a298bc11e1cbff0b23c89abcd4168624fe01b35f96d8a28935cbaf947c"


def snapshot_fields(state: TenantState) -> list:
    packed = zstandard.ZstdDecompressor().decompressobj().decompress(state.snapshot())
    return msgpack.unpackb(packed, raw=False, use_list=True, strict_map_key=False)


def test_an_old_journal_replays_to_the_same_state_and_its_fires_are_remembered():
    state = TenantState()
    answers = [state.apply(decode_command(entry)) for entry in OLD_JOURNAL]
    assert answers[2]["appended"] == 2
    assert [(r["status"], r.get("offset")) for r in answers[3]["results"]] == [("fired", 0), ("cancelled", None)]
    fields = snapshot_fields(state)
    # No timer is left pending; the timers' layout changed in format 3 (timer_wire.py), and in
    # formats 1 and 2 an empty table was the empty list of columns.
    assert state.timers.count == 0
    fields[5] = msgpack.packb([], use_bin_type=True)
    assert hashlib.sha256(msgpack.packb(fields[1:8], use_bin_type=True)).hexdigest() == OLD_JOURNAL_STATE_SHA256
    assert state.fired_timer("orders", "order/2")["partition"] == "eu"
    state.check_invariants()


def test_a_format_1_snapshot_restores_with_an_empty_memory():
    state = TenantState()
    for entry in OLD_JOURNAL:
        state.apply(decode_command(entry))
    fields = snapshot_fields(state)
    assert state.timers.count == 0
    fields[5] = msgpack.packb([], use_bin_type=True)  # no timer pending, in the columns of format 1
    old = zstandard.ZstdCompressor(level=1).compress(msgpack.packb([1, *fields[1:8]], use_bin_type=True))
    restored = TenantState.restore(old)
    assert len(restored.fired_memory) == 0
    assert snapshot_fields(restored)[1:5] == fields[1:5] and snapshot_fields(restored)[6:8] == fields[6:8]
    assert cancel_answer(restored, restored.clock, "order/2", queue="orders")["status"] == "absent"


def test_an_unknown_snapshot_format_is_refused():
    fields = snapshot_fields(TenantState())
    with pytest.raises(ValueError, match="snapshot format 9"):
        TenantState.restore(zstandard.ZstdCompressor().compress(msgpack.packb([9, *fields[1:]])))
