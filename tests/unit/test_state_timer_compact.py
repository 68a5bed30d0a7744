"""The compact stored forms of a timer: a txn equal to the timerKey shares the key's str; what a
failed fire changes is one field, None before. Every answer must show exactly what was scheduled,
before and after a snapshot's restore."""

from __future__ import annotations

import msgpack
import pytest

from queen_raft.state import TenantState
from queen_raft.state.timers import T_KEY, T_RETRY, T_TXN, WIRE_FIELDS, TimerTable

T0 = 1_700_000_000_000
COUNT = 12


def schedule(key: str, txn: str, delay: int = 100) -> dict:
    return {"op": "schedule", "queue": "q", "timerKey": key, "partition": "Default",
            "delayMs": delay, "txn": txn, "messageId": f"m-{key}", "payload": b"body",
            "payloadZstd": False, "encrypted": False}


def key_of(i: int) -> str:
    return f"k{i:03d}"


def txn_of(i: int) -> str:
    """Every other timer's txn equals its key (a fresh, equal str: never the same object)."""
    return "".join(["k", f"{i:03d}"]) if i % 2 else f"tx{i}"


def scheduled_state() -> TenantState:
    state = TenantState()
    answer = state.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
                          "ops": [schedule(key_of(i), txn_of(i)) for i in range(COUNT)]})
    assert all(result["ok"] for result in answer["results"])
    return state


@pytest.mark.parametrize("restart", [False, True])
def test_peek_list_and_fire_show_the_scheduled_txn(restart):
    state = scheduled_state()
    if restart:
        state = TenantState.restore(state.snapshot())
    for i in range(COUNT):
        assert state.peek_timer("q", key_of(i))["txn"] == txn_of(i)
    rows = state.list_timers("q", limit=1000)["rows"]
    assert [row["txn"] for row in rows] == [txn_of(i) for i in range(COUNT)]
    state.apply({"op": "tick", "now": T0 + 100})
    fetched = state.fetch("q", "Default", 0, 1000)
    assert [record["transactionId"] for record in fetched] == [txn_of(i) for i in range(COUNT)]


@pytest.mark.parametrize("restart", [False, True])
def test_a_txn_equal_to_the_key_is_stored_as_the_keys_object(restart):
    state = scheduled_state()
    if restart:
        state = TenantState.restore(state.snapshot())
    for i in range(COUNT):
        timer = state.timers.get("q", key_of(i))
        assert (timer[T_TXN] is timer[T_KEY]) == (i % 2 == 1)


def test_a_reschedule_shares_the_key_too_and_keeps_a_different_txn():
    state = scheduled_state()
    state.apply({"op": "timers", "now": T0 + 1, "producerSub": "s", "maxPending": None,
                 "ops": [dict(schedule(key_of(0), "".join(["k", "000"])), op="reschedule"),
                         dict(schedule(key_of(1), "other"), op="reschedule")]})
    first, second = state.timers.get("q", key_of(0)), state.timers.get("q", key_of(1))
    assert first[T_TXN] is first[T_KEY]
    assert second[T_TXN] == "other"
    assert state.peek_timer("q", key_of(1))["txn"] == "other"
    again = TenantState.restore(state.snapshot())
    assert again.snapshot() == state.snapshot()


def test_the_retry_field_stays_none_until_a_failure_and_restores_exactly():
    """attempts, lastError and deliverAt live in one field, None until a fire fails; transient
    (attempts stays 0) and permanent failures both peek alike before and after a restore, and a
    format-2 snapshot's WIRE_FIELDS columns still restore to the same table."""
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"maxSize": 1}})
    broken = dict(schedule("broken", "t-broken", delay=0), payloadZstd=True)
    state.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
                 "ops": [schedule("first", "t-first", delay=0), schedule("later", "t-later"),
                         schedule("full", "t-full", delay=0), broken]})
    assert state.timers.get("q", "later")[T_RETRY] is None
    assert state.timers.get("q", "full")[T_RETRY] == (0, "queue_full", T0)
    assert state.timers.get("q", "broken")[T_RETRY] == (
        1, "payload_zstd: the payload does not decompress", T0)
    peeks = {key: state.peek_timer("q", key) for key in ("later", "full", "broken")}
    assert (peeks["later"]["attempts"], peeks["later"]["lastError"],
            peeks["later"]["deliverAt"], peeks["later"]["dueAt"]) == (0, None, T0 + 100, T0 + 100)
    assert (peeks["full"]["attempts"], peeks["full"]["deliverAt"]) == (0, T0)
    assert peeks["full"]["dueAt"] > T0
    restored = TenantState.restore(state.snapshot())
    assert {key: restored.peek_timer("q", key) for key in peeks} == peeks
    assert [timer[T_RETRY] for timer in restored.timers.iter_due()] == [
        timer[T_RETRY] for timer in state.timers.iter_due()]
    assert restored.snapshot() == state.snapshot()
    columns = format_2_columns(state)
    by_key = dict(zip(columns[WIRE_FIELDS.index("key")], zip(*columns)))
    attempts, last_error, deliver_at = (WIRE_FIELDS.index(name)
                                        for name in ("attempts", "last_error", "deliver_at"))
    assert [by_key["later"][i] for i in (attempts, last_error, deliver_at)] == [0, None, T0 + 100]
    assert [by_key["full"][i] for i in (attempts, last_error, deliver_at)] == [0, "queue_full", T0]
    old = TimerTable.from_wire(msgpack.packb(columns, use_bin_type=True), 2)
    assert list(old.iter_due()) == list(state.timers.iter_due())
    assert old.to_wire() == state.timers.to_wire()


def format_2_columns(state: TenantState) -> list[list]:
    """The timers as a format-2 snapshot held them: one column per WIRE_FIELDS, rows in due order,
    the retry field as its three columns (attempts, lastError, deliverAt)."""
    rows = []
    for timer in state.timers.iter_due():
        retry = timer[T_RETRY] or (0, None, timer[0])
        rows.append([*timer[:T_RETRY], *retry, *timer[T_RETRY + 1:]])
    return [list(column) for column in zip(*rows)]
