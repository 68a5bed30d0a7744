"""ProposalBatcher and the batch entry format, against a fake pysyncobj that applies each entry at once
through the real ReplicatedTenantState (so a batch is decoded and applied as a replica would)."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
from pysyncobj import FAIL_REASON

from queen_raft.raft.proposal_batch import (
    ProposalBatcher,
    batch_bytes,
    decode_batch,
    encode_batch,
    is_batch_entry,
    settle_future,
)
from queen_raft.raft.replicated_state import ReplicatedTenantState, encode_command


class LogState:
    """A deterministic state: `set` stores, `refuse` is refused, `boom` raises, `incr` counts."""

    def __init__(self, values=None, applied=0):
        self.values = dict(values or {})
        self.applied = applied

    def apply(self, command):
        self.applied += 1
        op = command["op"]
        if op == "set":
            self.values[command["key"]] = command["value"]
            return {"ok": True, "applied": self.applied}
        if op == "incr":
            self.values[command["key"]] = self.values.get(command["key"], 0) + 1
            return {"ok": True, "value": self.values[command["key"]], "applied": self.applied}
        if op == "refuse":
            return {"error": "bad_request", "message": "refused on purpose"}
        if op == "boom":
            raise RuntimeError("boom")
        return {"error": "bad_request", "message": f"unknown {op}"}

    def next_due_at(self):
        return self.applied

    def snapshot(self) -> bytes:
        return msgpack.packb({"values": self.values, "applied": self.applied}, use_bin_type=True)

    @classmethod
    def restore(cls, data):
        body = msgpack.unpackb(data, raw=False)
        return cls(body["values"], body["applied"])


def replica(dues=None) -> ReplicatedTenantState:
    return ReplicatedTenantState(LogState, LogState.restore, (dues if dues is not None else []).append)


def apply_entry(consumer: ReplicatedTenantState, entry: bytes):
    return consumer.apply(entry, _doApply=True)  # how pysyncobj runs the body on every replica


class FakeRaft:
    """Records each proposed entry; answers at once (apply on a replica) unless held."""

    def __init__(self, consumer: ReplicatedTenantState | None = None, hold: bool = False):
        self.consumer = consumer or replica()
        self.hold = hold
        self.entries: list[bytes] = []
        self.waiting: list = []  # (entry, on_answer) not answered yet

    def submit(self, entry: bytes, on_answer) -> None:
        self.entries.append(entry)
        if self.hold:
            self.waiting.append((entry, on_answer))
        else:
            on_answer(apply_entry(self.consumer, entry), FAIL_REASON.SUCCESS)

    def answer_next(self, error=FAIL_REASON.SUCCESS) -> None:
        entry, on_answer = self.waiting.pop(0)
        on_answer(apply_entry(self.consumer, entry) if error == FAIL_REASON.SUCCESS else None, error)


def make_batcher(raft: FakeRaft, **bounds) -> ProposalBatcher:
    loop = asyncio.get_running_loop()
    # The group's handoff runs settle on the loop later; so does this one.
    deliver = lambda settle, result, error: loop.call_soon(settle, result, error)  # noqa: E731
    return ProposalBatcher(loop, raft.submit, deliver, **bounds)


def propose(batcher: ProposalBatcher, command: dict, timeout_s: float = 5.0) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    batcher.add(encode_command(command), future, timeout_s)
    return future


def commands_of(entry: bytes) -> list[dict]:
    if is_batch_entry(entry):
        return [msgpack.unpackb(sub, raw=False) for sub in decode_batch(entry)]
    return [msgpack.unpackb(entry, raw=False)]


async def test_commands_of_one_iteration_share_one_entry_in_order_each_with_its_own_result():
    raft = FakeRaft()
    batcher = make_batcher(raft)
    commands = [{"op": "incr", "key": "n", "now": i} for i in range(10)]
    futures = [propose(batcher, c) for c in commands]
    answers = await asyncio.gather(*futures)
    assert len(raft.entries) == 1 and is_batch_entry(raft.entries[0])
    assert commands_of(raft.entries[0]) == commands
    # Each caller gets exactly what its own entry would have answered, applied one by one.
    alone = replica()
    expected = [apply_entry(alone, encode_command(c)) for c in commands]
    assert [result for result, _ in answers] == expected
    assert [result["value"] for result, _ in answers] == list(range(1, 11))
    assert all(error == FAIL_REASON.SUCCESS for _, error in answers)
    assert batcher.entries_proposed == 1 and batcher.commands_proposed == 10


async def test_a_refused_or_raising_command_does_not_affect_its_neighbours():
    dues = []
    raft = FakeRaft(replica(dues))
    batcher = make_batcher(raft)
    commands = [{"op": "set", "key": "a", "value": 1}, {"op": "boom"}, {"op": "refuse"},
                {"op": "set", "key": "b", "value": 2}]
    answers = [result for result, _ in await asyncio.gather(*[propose(batcher, c) for c in commands])]
    assert len(raft.entries) == 1
    assert answers[0] == {"ok": True, "applied": 1}
    assert answers[1]["error"] == "internal" and "RuntimeError" in answers[1]["message"]
    assert answers[2]["error"] == "bad_request"
    assert answers[3] == {"ok": True, "applied": 4}
    assert raft.consumer.state.values == {"a": 1, "b": 2}
    assert raft.consumer.internal_errors == 1
    assert dues == [4]  # one report per entry, with the state after the whole batch


async def test_a_lone_command_goes_on_the_next_loop_iteration_as_a_plain_entry():
    raft = FakeRaft(hold=True)
    batcher = make_batcher(raft)
    future = propose(batcher, {"op": "set", "key": "k", "value": 1})
    assert raft.entries == []  # not inside add(): the commands of this iteration may still join
    await asyncio.sleep(0)  # one loop iteration, no timer
    assert len(raft.entries) == 1
    assert not is_batch_entry(raft.entries[0])  # the single-command format of old journals
    assert raft.entries[0] == encode_command({"op": "set", "key": "k", "value": 1})
    raft.answer_next()
    result, error = await future
    assert result == {"ok": True, "applied": 1} and error == FAIL_REASON.SUCCESS


async def test_commands_are_held_only_while_the_in_flight_bound_is_reached():
    raft = FakeRaft(hold=True)
    batcher = make_batcher(raft, entries_in_flight_max=2)
    first = propose(batcher, {"op": "incr", "key": "n"})
    await asyncio.sleep(0)
    second = propose(batcher, {"op": "incr", "key": "n"})
    await asyncio.sleep(0)
    assert len(raft.entries) == 2  # below the bound: each went at once, alone
    held = [propose(batcher, {"op": "incr", "key": "n", "i": i}) for i in range(5)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(raft.entries) == 2 and batcher.commands_held == 5
    raft.answer_next()  # one slot frees: everything held goes as one entry
    assert (await first)[0]["value"] == 1
    await asyncio.sleep(0)
    assert len(raft.entries) == 3 and batcher.commands_held == 0
    assert [c["i"] for c in commands_of(raft.entries[2])] == list(range(5))
    raft.answer_next()
    raft.answer_next()
    assert (await second)[0]["value"] == 2
    assert [(await f)[0]["value"] for f in held] == [3, 4, 5, 6, 7]
    assert batcher.entries_in_flight == 0


async def test_a_batch_respects_the_command_count_bound():
    raft = FakeRaft()
    batcher = make_batcher(raft, commands_max=3, entries_in_flight_max=10)
    futures = [propose(batcher, {"op": "incr", "key": "n", "i": i}) for i in range(7)]
    await asyncio.gather(*futures)
    assert [len(commands_of(e)) for e in raft.entries] == [3, 3, 1]
    assert [c["i"] for e in raft.entries for c in commands_of(e)] == list(range(7))


async def test_a_batch_respects_the_byte_bound_and_a_command_near_it_goes_alone():
    raft = FakeRaft()
    bytes_max = 2000
    batcher = make_batcher(raft, bytes_max=bytes_max, entries_in_flight_max=10)
    small = [{"op": "set", "key": f"s{i}", "value": "x" * 300} for i in range(4)]
    big = {"op": "set", "key": "big", "value": "y" * (bytes_max - 40)}  # fits alone, not with another
    futures = [propose(batcher, c) for c in [small[0], small[1], big, small[2], small[3]]]
    answers = await asyncio.gather(*futures)
    assert all(result["ok"] for result, _ in answers)
    assert all(len(entry) <= bytes_max for entry in raft.entries)
    sizes = [len(commands_of(e)) for e in raft.entries]
    assert sizes == [2, 1, 2]
    assert not is_batch_entry(raft.entries[1]) and commands_of(raft.entries[1]) == [big]
    # The bound is an upper bound on the real encoding.
    encoded = [encode_command(c) for c in small[:2]]
    assert len(encode_batch(encoded)) <= batch_bytes([len(e) for e in encoded])


async def test_a_pysyncobj_failure_reaches_every_caller_of_the_batch():
    raft = FakeRaft(hold=True)
    batcher = make_batcher(raft, entries_in_flight_max=1)
    first = propose(batcher, {"op": "set", "key": "a", "value": 1})
    await asyncio.sleep(0)
    batch = [propose(batcher, {"op": "set", "key": f"k{i}", "value": i}) for i in range(4)]
    raft.answer_next()
    await first
    await asyncio.sleep(0)
    assert len(raft.entries) == 2 and is_batch_entry(raft.entries[1])
    raft.answer_next(FAIL_REASON.LEADER_CHANGED)
    assert [await f for f in batch] == [(None, FAIL_REASON.LEADER_CHANGED)] * 4
    assert raft.consumer.state.values == {"a": 1}


async def test_an_exception_while_proposing_reaches_every_caller():
    def submit(entry, on_answer):
        raise RuntimeError("pysyncobj refused")

    loop = asyncio.get_running_loop()
    batcher = ProposalBatcher(loop, submit, lambda settle, result, error: settle(result, error))
    futures = [propose(batcher, {"op": "set", "key": f"k{i}", "value": i}) for i in range(3)]
    answers = await asyncio.gather(*futures)
    assert all(result is None and isinstance(error, RuntimeError) for result, error in answers)
    assert batcher.entries_in_flight == 0


async def test_a_command_whose_caller_gave_up_while_held_is_never_proposed():
    raft = FakeRaft(hold=True)
    batcher = make_batcher(raft, entries_in_flight_max=1)
    first = propose(batcher, {"op": "set", "key": "a", "value": 1})
    await asyncio.sleep(0)
    gave_up = propose(batcher, {"op": "set", "key": "gone", "value": 1})
    kept = propose(batcher, {"op": "set", "key": "kept", "value": 1})
    settle_future(gave_up, None, "timed out")  # as group.py's per-call timer does
    raft.answer_next()
    await first
    await asyncio.sleep(0)
    assert commands_of(raft.entries[1]) == [{"op": "set", "key": "kept", "value": 1}]
    raft.answer_next()
    assert (await kept)[0]["ok"] is True
    assert "gone" not in raft.consumer.state.values


async def test_an_entry_whose_answer_never_comes_frees_its_slot_at_its_callers_deadline():
    raft = FakeRaft(hold=True)
    batcher = make_batcher(raft, entries_in_flight_max=1)
    lost = propose(batcher, {"op": "set", "key": "lost", "value": 1}, timeout_s=0.05)
    await asyncio.sleep(0)
    behind = propose(batcher, {"op": "set", "key": "behind", "value": 1})
    await asyncio.sleep(0.02)
    assert len(raft.entries) == 1  # held behind the entry in flight
    await asyncio.sleep(0.06)
    assert len(raft.entries) == 2  # the lost entry's slot was given up at its deadline
    raft.waiting.pop(0)  # pysyncobj never answers the lost one
    raft.answer_next()
    assert (await behind)[0]["ok"] is True
    assert not lost.done()  # its own timer (in group.py) answers it, not the batcher


def test_old_single_command_entries_still_apply_and_are_told_apart_by_their_first_byte():
    consumer = replica()
    single = encode_command({"op": "set", "key": "old", "value": 1})
    assert not is_batch_entry(single)
    assert apply_entry(consumer, single) == {"ok": True, "applied": 1}
    batch = encode_batch([encode_command({"op": "set", "key": "new", "value": 2})] * 2)
    assert is_batch_entry(batch)
    assert apply_entry(consumer, batch) == [{"ok": True, "applied": 2}, {"ok": True, "applied": 3}]
    # Array headers of every size: fixarray, array16 (16+ items).
    assert is_batch_entry(encode_batch([single] * 20)) and not is_batch_entry(b"")


def test_a_batch_applies_exactly_as_its_commands_would_one_entry_each():
    commands = [{"op": "set", "key": "a", "value": b"\x00bin"}, {"op": "incr", "key": "n"}, {"op": "boom"},
                {"op": "refuse"}, {"op": "incr", "key": "n"}, {"op": "set", "key": "a", "value": [1, 2]}]
    entries = [encode_command(c) for c in commands]
    one_by_one, batched = replica(), replica()
    alone = [apply_entry(one_by_one, e) for e in entries]
    assert apply_entry(batched, encode_batch(entries)) == alone
    assert batched.state.snapshot() == one_by_one.state.snapshot()


def test_a_batch_reads_the_next_due_instant_once_after_its_last_command():
    reads = []

    class CountingState(LogState):
        def next_due_at(self):
            reads.append(self.applied)
            return super().next_due_at()

    dues: list = []
    consumer = ReplicatedTenantState(CountingState, CountingState.restore, dues.append)
    commands = [{"op": "incr", "key": "n"}, {"op": "boom"}, {"op": "set", "key": "a", "value": 1}, {"op": "refuse"}]
    apply_entry(consumer, encode_batch([encode_command(c) for c in commands]))
    # One read, of the state after the whole entry (the refusal and the error count as applies).
    assert reads == [4] and dues == [4]
    apply_entry(consumer, encode_command({"op": "incr", "key": "n"}))  # a plain entry reads it too
    assert reads == [4, 5] and dues == [4, 5]


def test_a_malformed_item_fails_alone_and_an_undecodable_batch_fails_whole():
    consumer = replica()
    good = encode_command({"op": "set", "key": "k", "value": 1})
    mixed = msgpack.packb([good, 7, b"\xc1junk", good], use_bin_type=True)
    results = apply_entry(consumer, mixed)
    assert [r.get("error") for r in results] == [None, "internal", "internal", None]
    assert consumer.state.applied == 2
    truncated = encode_batch([good, good])[:-3]
    assert is_batch_entry(truncated)
    whole = apply_entry(consumer, truncated)
    assert isinstance(whole, dict) and whole["error"] == "internal"
    assert consumer.state.applied == 2


@pytest.mark.parametrize("bounds", [{"commands_max": 0}, {"entries_in_flight_max": 0}])
async def test_bounds_below_one_are_refused(bounds):
    with pytest.raises(ValueError):
        make_batcher(FakeRaft(), **bounds)


async def test_a_whole_batch_refusal_reaches_every_caller_of_the_batch():
    raft = FakeRaft()
    real_submit = raft.submit
    # A batch that replicas cannot decode (as if corrupted): each caller gets the one refusal.
    raft.submit = lambda entry, on_answer: real_submit(entry[:-3] if is_batch_entry(entry) else entry, on_answer)
    batcher = make_batcher(raft)
    answers = await asyncio.gather(*[propose(batcher, {"op": "set", "key": f"k{i}", "value": i}) for i in range(3)])
    assert [result["error"] for result, _ in answers] == ["internal"] * 3
    assert raft.consumer.state.values == {}


# --- DeadlineSlots: callers' commit timeouts sharing loop timers ----------------------------------

async def test_deadline_slots_time_out_only_the_calls_still_waiting_never_early():
    from queen_raft.raft.proposal_batch import DeadlineSlots

    loop = asyncio.get_running_loop()
    expired = []
    slots = DeadlineSlots(loop, expired.append, slot_s=0.01)
    answered, waiting, later = loop.create_future(), loop.create_future(), loop.create_future()
    armed_at = loop.time()
    keys = {f: slots.arm(f, timeout_s) for f, timeout_s in ((answered, 0.03), (waiting, 0.03), (later, 0.2))}
    assert keys[answered] == keys[waiting] and slots.handles == 2 and len(slots) == 3
    slots.disarm(answered, keys[answered])  # answered before its deadline: never expired
    while not expired:
        await asyncio.sleep(0.005)
    assert expired == [waiting] and loop.time() - armed_at >= 0.03
    assert slots.handles == 1 and len(slots) == 1
    slots.disarm(waiting, keys[waiting])  # the caller's finally, after its timeout: harmless
    slots.disarm(later, keys[later])  # the last of its slot: its handle is cancelled
    assert slots.handles == 0 and len(slots) == 0
    await asyncio.sleep(0.25)
    assert expired == [waiting]


async def test_a_proposal_that_never_commits_times_out_through_its_slot():
    """group.py's use: the future settles with the timeout marker, the slot is gone afterwards."""
    from queen_raft.raft.proposal_batch import DeadlineSlots

    loop = asyncio.get_running_loop()
    timed_out = object()
    slots = DeadlineSlots(loop, lambda future: settle_future(future, None, timed_out), slot_s=0.01)
    futures = [loop.create_future() for _ in range(50)]
    keys = [slots.arm(future, 0.02) for future in futures]
    assert slots.handles <= 2  # fifty calls, one or two loop timers (the window may turn between)
    settle_future(futures[0], {"ok": True}, FAIL_REASON.SUCCESS)
    results = await asyncio.gather(*futures)
    for future, key in zip(futures, keys):
        slots.disarm(future, key)
    assert results[0] == ({"ok": True}, FAIL_REASON.SUCCESS)
    assert all(result == (None, timed_out) for result in results[1:])
    assert slots.handles == 0
