"""A pending timer's stored entry (queen_raft/state/timer_entries.py): bytes order must be
(dueAt, queue, timerKey) order for any names the state may hold (NULs, surrogates, prefixes of
each other, the empty string, negative instants), and the entry must give back exactly the timer
it was made from. The snapshot layout of the entries (timer_wire.py) must restore every index."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.state import TenantState
from queen_raft.state.limits import DEFAULT_PARTITION
from queen_raft.state.due_runs import timers_of
from queen_raft.state.timer_entries import entry_of, queue_and_key, timer_of
from queen_raft.state.timers import TimerTable

# Few distinct characters, NUL and a lone surrogate among them, so names often begin one another.
NAME_CHARS = st.sampled_from(["a", "b", "\x00", "\x01", "\xff", "\ud800", "\U0001f600", "\ue000"])
NAMES = st.text(NAME_CHARS, max_size=4)
INSTANTS = st.integers(min_value=-(2**62), max_value=2**62)


def timer(due_at: int, queue: str, key: str, **fields) -> tuple:
    values = {"partition": DEFAULT_PARTITION, "txn": key, "message_id": "m", "payload": b"p",
              "payload_zstd": False, "encrypted": False, "producer_sub": None, "retry": None,
              "created_at": due_at - 5, "updated_at": due_at - 5, **fields}
    return (due_at, queue, key, values["partition"], values["txn"], values["message_id"],
            values["payload"], values["payload_zstd"], values["encrypted"], values["producer_sub"],
            values["retry"], values["created_at"], values["updated_at"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), NAMES, NAMES), min_size=2, max_size=12, unique=True))
def test_entries_sort_as_due_queue_key_and_decode_to_their_timers(triples):
    timers = [timer(*triple) for triple in triples]
    entries = [entry_of(t) for t in timers]
    assert [timer_of(entry) for entry in sorted(entries)] == sorted(timers)
    for t, entry in zip(timers, entries):
        assert queue_and_key(entry) == (t[1], t[2])


@settings(max_examples=200, deadline=None)
@given(INSTANTS, NAMES, NAMES, st.text(max_size=5), st.text(max_size=5), st.binary(max_size=8),
       st.booleans(), st.none() | st.text(max_size=3),
       st.none() | st.tuples(st.integers(0, 9), st.text(max_size=4), INSTANTS),
       st.integers(-1000, 1000), st.integers(0, 1000))
def test_every_field_comes_back(due_at, queue, key, partition, txn, payload, flag, sub, retry, age, later):
    original = timer(due_at, queue, key, partition=partition, txn=txn, message_id=txn + "!",
                     payload=payload, payload_zstd=flag, encrypted=not flag, producer_sub=sub,
                     retry=retry, created_at=due_at - age, updated_at=due_at - age + later)
    assert timer_of(entry_of(original)) == original


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 2), NAMES, NAMES, st.text(max_size=3), st.binary(max_size=6),
                          st.none() | st.tuples(st.integers(0, 9), st.text(max_size=4), INSTANTS),
                          st.none() | st.text(max_size=3), st.integers(-50, 50)),
                max_size=12, unique_by=lambda fields: fields[:3]))
def test_timers_of_decodes_a_batch_as_timer_of_decodes_each(rows):
    """The fire decodes its batch in bulk: the same tuples as one timer_of per entry, runs of one
    instant and queue or not, NULs in names or not, every field set or not."""
    timers = [timer(due_at, queue, key, partition=partition or DEFAULT_PARTITION, txn=partition[::-1] or key,
                    payload=payload, retry=retry, producer_sub=sub, created_at=due_at - age,
                    updated_at=due_at + age)
              for due_at, queue, key, partition, payload, retry, sub, age in rows]
    entries = sorted(entry_of(t) for t in timers)
    decoded = timers_of(entries)
    assert decoded == [timer_of(entry) for entry in entries]
    for t in decoded:
        assert type(t[11]) is int and type(t[12]) is int
        if t[4] == t[2]:
            assert t[4] is t[2]  # a txn equal to the key is the key's object, as timer_of gives it


def test_a_txn_equal_to_the_key_comes_back_as_the_keys_object():
    decoded = timer_of(entry_of(timer(1, "q", "k" * 3, txn="kkk")))
    assert decoded[4] is decoded[2]


def test_the_stored_entry_is_smaller_than_the_tuple_it_replaces():
    """The point of the layout: one bytes object instead of a 13-slot tuple and its boxed fields."""
    entry = entry_of(timer(1_767_225_600_000, "bench", "mem-123456", payload=b"x" * 66,
                           producer_sub="bench-producer"))
    assert len(entry) <= 66 + 64


def several_queue_state() -> TenantState:
    state = TenantState()
    ops = [{"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default",
            "delayMs": delay, "txn": f"t-{key}", "messageId": f"m-{key}", "payload": b"x",
            "payloadZstd": False, "encrypted": False}
           for queue, key, delay in (("b", "z", 5), ("a", "y", 5), ("b", "a", 9), ("a\x00", "k", 1),
                                     ("a", "\x00", 7), ("\U0001f600", "e", 3), ("b", "m", 2))]
    answer = state.apply({"op": "timers", "now": 1_000, "producerSub": "s", "maxPending": None, "ops": ops})
    assert all(result["ok"] for result in answer["results"]), answer
    return state


def test_a_snapshot_restores_every_index_of_several_queues():
    state = several_queue_state()
    restored = TenantState.restore(state.snapshot())
    restored.check_invariants()
    assert list(restored.timers.iter_due()) == list(state.timers.iter_due())
    assert {q: list(keys) for q, keys in restored.timers.keys.items()} == {
        q: list(keys) for q, keys in state.timers.keys.items()}
    assert restored.snapshot() == state.snapshot()
    assert [row["timerKey"] for row in restored.list_timers("b", limit=10)["rows"]] == ["a", "m", "z"]


def test_the_snapshot_positions_point_at_each_keys_entry():
    """Per queue, keys in key order and, for each, the place of its entry in the due order."""
    state = several_queue_state()
    entries, queues = msgpack.unpackb(state.timers.to_wire(), raw=False)
    assert entries == sorted(entries)
    assert [queue for queue, _, _ in queues] == sorted(state.timers.by_queue)
    for queue, keys, raw_positions in queues:
        positions = [int.from_bytes(raw_positions[i:i + 4], "little") for i in range(0, len(raw_positions), 4)]
        assert keys == sorted(keys)
        assert [queue_and_key(entries[p]) for p in positions] == [(queue, key) for key in keys]


def test_a_table_from_format_3_equals_the_table_it_was_written_from():
    state = several_queue_state()
    table = TimerTable.from_wire(state.timers.to_wire(), 3)
    assert table.count == state.timers.count == 7
    assert table.by_queue == state.timers.by_queue


def test_timers_of_tells_a_queue_from_a_longer_one_that_begins_with_it_and_a_nul():
    """Entries of "q" and of "q\\x00..." at one instant share the bytes up to q's ending NUL; the
    escaped NUL after it marks the longer name, which must not be read as a key of "q"."""
    names = ["", "\x00", "q", "q\x00", "q\x00\x00", "q\x00x", "\x00q"]
    timers = [timer(7, queue, key) for queue in names for key in names]
    entries = sorted(entry_of(t) for t in timers)
    assert timers_of(entries) == [timer_of(entry) for entry in entries] == sorted(timers)
