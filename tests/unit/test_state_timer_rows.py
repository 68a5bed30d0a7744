"""The schedule_rows group of a `timers` command (docs/commands.md): the same schedules as maps,
positional. Same answers, same state, same snapshot bytes, same refusals (code, message, index);
and entries of the map form, the only form of older journals, apply as they always did."""

from __future__ import annotations

import msgpack
import pytest

from queen_raft.raft.replicated_state import ReplicatedTenantState, encode_command
from queen_raft.state import TenantState
from queen_raft.state.timer_ops import ROW_FIELDS
from queen_raft.state.timers import T_KEY, T_TXN

T0 = 1_700_000_000_000
MAX_DELAY_MS = 2**50


def schedule(queue: str, key: str, delay: int = 10_000, txn: str | None = None, **extra) -> dict:
    op = {"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default", "delayMs": delay,
          "txn": key if txn is None else txn, "messageId": f"mid-{queue}-{key}", "payload": b"body-" + key.encode(),
          "payloadZstd": False, "encrypted": False}
    op.update(extra)
    return op


def cancel(queue: str, key: str, txn: str | None = None) -> dict:
    return {"op": "cancel", "queue": queue, "timerKey": key, "txn": txn}


def row_of(op: dict) -> list:
    return [op[name] for name in ROW_FIELDS]


def grouped(ops: list[dict]) -> list[dict]:
    """The same ops with every run of schedules as one schedule_rows group."""
    out: list[dict] = []
    for op in ops:
        if op["op"] == "cancel":
            out.append(op)
        elif out and out[-1]["op"] == "schedule_rows":
            out[-1]["rows"].append(row_of(op))
        else:
            out.append({"op": "schedule_rows", "rows": [row_of(op)]})
    return out


def command(now: int, ops: list[dict], max_pending: int | None = None) -> dict:
    return {"op": "timers", "now": now, "producerSub": "sub-1", "maxPending": max_pending, "ops": ops}


def shipped(value: dict) -> dict:
    """As a replica gets it: through msgpack, as the Raft layer ships it."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


def both(states: tuple[TenantState, TenantState], now: int, ops: list[dict], **kw) -> tuple[dict, dict]:
    maps_state, rows_state = states
    return (maps_state.apply(shipped(command(now, ops, **kw))),
            rows_state.apply(shipped(command(now, grouped(ops), **kw))))


STEPS = [
    (T0, [schedule("q", f"k{i}", delay=1000 + 37 * i % 500) for i in range(40)]),
    # reschedules mixed with new keys and other queues; a txn equal to the key and one not
    (T0 + 5, [schedule("q", "k3", delay=50, txn="t3"), schedule("q2", "a"), schedule("q", "k40"),
              schedule("q3", "z", partition="p1", payloadZstd=True, encrypted=True)]),
    # cancels between groups, a cancel of an absent key, and schedules already due
    (T0 + 10, [schedule("q", "k5", delay=-5), cancel("q", "k6"), cancel("q", "never", txn="tx"),
               schedule("q", "k7", delay=0), schedule("q4", "n", delay=-100)]),
    # the group clock does not run backwards
    (T0 - 1000, [schedule("q", "late", delay=100), schedule("q", "k1", delay=10)]),
    (T0 + 2000, []),
]


def test_groups_answer_and_store_exactly_what_the_same_maps_do():
    states = (TenantState(), TenantState())
    for now, ops in STEPS:
        if ops:
            maps_answer, rows_answer = both(states, now, ops)
            assert rows_answer == maps_answer
            assert "results" in rows_answer
        tick = {"op": "tick", "now": now + 1500}
        assert states[1].apply(dict(tick)) == states[0].apply(dict(tick))
        assert states[1].snapshot() == states[0].snapshot()
        assert states[1].counters() == states[0].counters()
    assert states[1].list_timers("q", limit=1000) == states[0].list_timers("q", limit=1000)
    assert states[1].peek_timer("q3", "z") == states[0].peek_timer("q3", "z")
    assert states[0].counters()["fired"]["appended"] > 0  # the due schedules did fire
    stored = [timer for timers in states[1].timers.by_queue.values() for timer in timers.values()]
    assert all(timer[T_TXN] is timer[T_KEY] for timer in stored if timer[T_TXN] == timer[T_KEY])


def test_a_restored_group_state_is_the_same_state():
    maps_state, rows_state = TenantState(), TenantState()
    for now, ops in STEPS[:3]:
        both((maps_state, rows_state), now, ops)
    restored = TenantState.restore(rows_state.snapshot())
    assert restored.snapshot() == maps_state.snapshot()


def test_a_transaction_takes_a_group_as_its_schedules():
    ops = [schedule("q", "a"), schedule("q", "b", delay=-1), cancel("q", "c")]
    answers = []
    for timers in (ops, grouped(ops)):
        state = TenantState()
        answers.append(state.apply(shipped({"op": "transaction", "now": T0, "producerSub": "s", "maxPending": 10,
                                            "operations": [], "kv": [], "timers": timers})))
        answers.append(state.snapshot())
    assert answers[2:] == answers[:2]
    assert answers[0]["success"] is True and len(answers[0]["results"]) == 3


def test_the_quota_counts_rows_as_their_schedules():
    for max_pending, refused in ((3, False), (2, True)):
        states = (TenantState(), TenantState())
        both(states, T0, [schedule("q", "a")])
        # a replaces, b and c are new: pending 3 after the batch
        maps_answer, rows_answer = both(states, T0, [schedule("q", "a"), schedule("q", "b"), schedule("q", "c")],
                                        max_pending=max_pending)
        assert rows_answer == maps_answer
        assert (rows_answer.get("error") == "timers_quota_exceeded") is refused
        assert states[1].snapshot() == states[0].snapshot()


@pytest.mark.parametrize("max_pending, refused", [(3, False), (2, True)])
def test_the_quota_holds_at_its_bound_for_new_timers(max_pending, refused):
    """One pending, two new schedules: three after the batch, one over a quota of two."""
    states = (TenantState(), TenantState())
    both(states, T0, [schedule("q", "a")])
    maps_answer, rows_answer = both(states, T0, [schedule("q", "b"), schedule("q", "c")], max_pending=max_pending)
    assert rows_answer == maps_answer
    assert (rows_answer.get("error") == "timers_quota_exceeded") is refused


def test_a_batch_that_only_replaces_passes_a_full_quota():
    states = (TenantState(), TenantState())
    both(states, T0, [schedule("q", "a"), schedule("q", "b")])
    maps_answer, rows_answer = both(states, T0 + 1, [schedule("q", "a"), schedule("q", "b")], max_pending=1)
    assert rows_answer == maps_answer
    assert [r["status"] for r in rows_answer["results"]] == ["rescheduled", "rescheduled"]


def test_a_paused_tenant_refuses_a_group():
    state = TenantState()
    state.apply({"op": "admin", "now": T0, "action": "pause"})
    answer = state.apply(shipped(command(T0, grouped([schedule("q", "a")]))))
    assert answer["error"] == "timers_disabled"
    assert state.counters()["pendingTimers"] == 0


BAD_OPS = {
    "queue empty": schedule("q", "b") | {"queue": ""},
    "timerKey not a string": schedule("q", "b") | {"timerKey": 7},
    "delayMs a bool": schedule("q", "b", delayMs=True),
    "delayMs a float": schedule("q", "b", delayMs=1.5),
    "delayMs past the bound": schedule("q", "b", delayMs=MAX_DELAY_MS + 1),
    "delayMs below the bound": schedule("q", "b", delayMs=-MAX_DELAY_MS - 1),
    "txn None": schedule("q", "b") | {"txn": None},
    "messageId an int": schedule("q", "b", messageId=5),
    "payload a str": schedule("q", "b", payload="body"),
    "partition an int": schedule("q", "b", partition=3),
    "payloadZstd an int": schedule("q", "b", payloadZstd=1),
    "encrypted None": schedule("q", "b", encrypted=None),
    "same key as a row before": schedule("q", "a"),
    "same key as the cancel before": schedule("q", "c"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPS))
def test_a_bad_row_is_refused_as_the_same_map_is(case):
    # the bad op is the fourth op, after a cancel, in a group's third row: index 3 both ways
    ops = [cancel("q", "c"), schedule("q", "x"), schedule("q", "a"), BAD_OPS[case]]
    states = (TenantState(), TenantState())
    maps_answer, rows_answer = both(states, T0, ops)
    assert maps_answer["error"] == "timers_bad_request" and maps_answer["index"] == 3
    assert rows_answer == maps_answer
    assert states[1].counters()["pendingTimers"] == 0


@pytest.mark.parametrize("group", [
    {"op": "schedule_rows"},
    {"op": "schedule_rows", "rows": []},
    {"op": "schedule_rows", "rows": "abc"},
    {"op": "schedule_rows", "rows": [row_of(schedule("q", "a"))[:-1]]},
    {"op": "schedule_rows", "rows": [row_of(schedule("q", "a")) + [1]]},
    {"op": "schedule_rows", "rows": [{"queue": "q"}]},
    {"op": "schedule_rows", "rows": ["q", "a", "Default", 5, "t", "m", b"p", False, False]},
])
def test_a_malformed_group_is_refused_and_changes_nothing(group):
    state = TenantState()
    answer = state.apply(shipped(command(T0, [schedule("q", "first"), group])))
    assert answer["error"] == "timers_bad_request" and answer["index"] == 1 and answer["message"]
    assert state.counters()["pendingTimers"] == 0


def test_rows_as_tuples_are_refused_like_any_non_list_row():
    """Only msgpack arrays are rows (msgpack decodes them as lists): a direct caller's tuple is not."""
    state = TenantState()
    answer = state.apply(command(T0, [{"op": "schedule_rows", "rows": [tuple(row_of(schedule("q", "a")))]}]))
    assert answer["error"] == "timers_bad_request"


# A `timers` entry as the API proposed it before schedule_rows (encode_command of its command, with
# pysyncobj's `now`): a schedule, a reschedule of a key that is absent (so: scheduled, and already
# due: it fires in the entry), a cancel of an absent key.
MAP_FORM_ENTRY = bytes.fromhex(
    "86a26f70a674696d657273ab70726f6475636572537562a761636d653a7277aa6d617850656e64696e67ce000f4240a6"
    "706f6c69637981a9666972654261746368cd0100a36f7073938aa26f70a87363686564756c65a57175657565a972656d"
    "696e64657273a874696d65724b6579aa747269616c3a61636d65a9706172746974696f6ea744656661756c74a764656c"
    "61794d73cd05dca374786ead747269616c2d61636d652d7631a77061796c6f6164c4087b226869223a317dab7061796c"
    "6f61645a737464c2a9656e63727970746564c2a96d6573736167654964d92430313961643465322d336231632d376132"
    "662d386534642d3563366237613866396530648aa26f70aa72657363686564756c65a57175657565a972656d696e6465"
    "7273a874696d65724b6579aa6f726465722d39313337a9706172746974696f6ea744656661756c74a764656c61794d73"
    "f6a374786eaa6f726465722d39313337a77061796c6f6164c40178ab7061796c6f61645a737464c2a9656e6372797074"
    "6564c2a96d6573736167654964d92430313961643465322d336231632d376132662d386534642d356336623761386639"
    "65306584a26f70a663616e63656ca57175657565a972656d696e64657273a874696d65724b6579a4676f6e65a374786e"
    "c0a36e6f77cf0000019ad4378640")
MAP_FORM_NOW = 1_764_497_000_000


def apply_entry(entry: bytes):
    consumer = ReplicatedTenantState(TenantState, TenantState.restore, lambda _due: None)
    return consumer.apply(entry, _doApply=True), consumer  # how pysyncobj runs it on every replica


def test_a_map_form_entry_of_an_older_journal_still_applies():
    answer, consumer = apply_entry(MAP_FORM_ENTRY)
    assert answer == {"results": [
        {"ok": True, "status": "scheduled", "queue": "reminders", "timerKey": "trial:acme", "txn": "trial-acme-v1",
         "messageId": "019ad4e2-3b1c-7a2f-8e4d-5c6b7a8f9e0d", "deliverAt": MAP_FORM_NOW + 1500},
        {"ok": True, "status": "scheduled", "queue": "reminders", "timerKey": "order-9137", "txn": "order-9137",
         "messageId": "019ad4e2-3b1c-7a2f-8e4d-5c6b7a8f9e0e", "deliverAt": MAP_FORM_NOW - 10},
        {"ok": False, "status": "absent", "queue": "reminders", "timerKey": "gone", "txn": None,
         "requestTxn": None},
    ]}
    state = consumer.state
    assert state.peek_timer("reminders", "trial:acme")["payload"] == b'{"hi":1}'
    assert state.peek_timer("reminders", "order-9137") is None  # fired in its entry
    assert state.counters()["fired"]["appended"] == 1


def test_the_same_entry_in_group_form_answers_and_stores_the_same():
    command = msgpack.unpackb(MAP_FORM_ENTRY, raw=False)
    command["ops"] = grouped(command["ops"])
    assert [op["op"] for op in command["ops"]] == ["schedule_rows", "cancel"]
    old_answer, old = apply_entry(MAP_FORM_ENTRY)
    new_answer, new = apply_entry(encode_command(command))
    assert new_answer == old_answer
    assert new.state.snapshot() == old.state.snapshot()
