"""Determinism: same entries -> same answers and snapshot bytes; snapshot+restore continues alike.

Also: `apply` never raises, and state/ imports nothing that can differ between replicas.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import zstandard

from queen_raft.state import TenantState

T0 = 1_700_000_000_000
STATE_DIR = Path(__file__).resolve().parents[2] / "queen_raft" / "state"
FORBIDDEN_MODULES = {"time", "random", "uuid", "os", "threading", "pysyncobj", "aiohttp",
                     "datetime", "secrets"}


def schedule(queue: str, key: str, delay: int, txn: str, payload: bytes = b"p",
             zstd: bool = False, partition: str = "Default") -> dict:
    return {"op": "schedule", "queue": queue, "timerKey": key, "partition": partition,
            "delayMs": delay, "txn": txn, "messageId": f"m-{txn}", "payload": payload,
            "payloadZstd": zstd, "encrypted": False}


def entries() -> list[dict]:
    """A history touching every command, failures and expiries included, with a wandering clock."""
    packed = zstandard.ZstdCompressor().compress(b"zipped body")
    log: list[dict] = [
        {"op": "configure", "now": T0, "queue": "q", "options": {"leaseTime": 2, "retryLimit": 1,
                                                                 "dedupWindowSeconds": 5}},
        {"op": "timers", "now": T0, "producerSub": "alice", "maxPending": 100, "ops": [
            schedule("q", f"k{i}", 100 * (i % 7), f"t{i}") for i in range(20)]},
        {"op": "timers", "now": T0 + 3, "producerSub": "bob", "maxPending": None, "ops": [
            schedule("q", "zip", 50, "tz", packed, True),
            schedule("q", "bad", 50, "tb", b"junk", True),
            schedule("other", "k1", -5, "to", partition="p2"),
            {"op": "cancel", "queue": "q", "timerKey": "k3", "txn": None},
            {"op": "cancel", "queue": "q", "timerKey": "missing", "txn": "x"}]},
        {"op": "push", "now": T0 + 2, "producerSub": "carol", "items": [
            {"queue": "q", "partition": "Default", "payload": b"m", "transactionId": f"p{i}",
             "messageId": f"mp{i}", "traceId": None, "encrypted": False} for i in range(5)]},
        {"op": "tick", "now": T0 + 200, "policy": {"fireBatch": 5}},
        {"op": "pop", "now": T0 + 201, "queue": "q", "partition": None, "consumerGroup": None,
         "batch": 4, "leaseId": "L1", "autoAck": False},
        {"op": "ack", "now": T0 + 202, "consumerGroup": None, "leaseId": "L1", "acknowledgments": [
            {"partition": "Default", "offset": 1, "status": "completed"},
            {"partition": "Default", "offset": 0, "status": "failed"},
            {"partition": "Default", "offset": 2, "status": "retry"}]},
        {"op": "tick", "now": T0 + 700},
        {"op": "pop", "now": T0 + 3000, "queue": "q", "partition": "Default",
         "consumerGroup": "g", "batch": 3, "leaseId": "L2", "autoAck": False},
        {"op": "lease_extend", "now": T0 + 3001, "leaseId": "L2", "seconds": 30},
        {"op": "pop", "now": T0 + 3002, "queue": "q", "partition": None, "consumerGroup": None,
         "batch": 2, "leaseId": "L3", "autoAck": False},
        {"op": "ack", "now": T0 + 3003, "consumerGroup": None, "leaseId": "L3", "acknowledgments": [
            {"partition": "Default", "offset": 0, "status": "failed", "error": "again"}]},
        {"op": "kv", "now": T0 + 3004, "ops": [
            {"op": "put", "ns": "n", "key": "a", "value": [1, 2], "ttlSeconds": 3},
            {"op": "incr", "ns": "n", "key": "c", "by": 2}]},
        {"op": "transaction", "now": T0 + 1000, "producerSub": "dan", "maxPending": None,
         "operations": [{"type": "push", "queue": "q", "partition": "Default", "payload": b"tx",
                         "transactionId": "ptx", "messageId": "mptx", "traceId": "tr",
                         "encrypted": False}],
         "kv": [{"op": "put", "ns": "n", "key": "b", "value": {"x": b"\x00"}}],
         "timers": [schedule("q", "k5", 10, "t5-new")]},
        {"op": "transaction", "now": T0 + 3005, "producerSub": "dan", "maxPending": None,
         "operations": [{"type": "push", "queue": "q", "partition": "Default", "payload": b"tx",
                         "transactionId": "ptx", "messageId": "mptx2", "traceId": None,
                         "encrypted": False}], "kv": [], "timers": []},
        {"op": "admin", "now": T0 + 3006, "action": "pause"},
    ]
    now = T0 + 4000
    for step in range(8):
        now += 1000 * (step + 1)
        log.append({"op": "tick", "now": now})
        log.append({"op": "pop", "now": now + 1, "queue": "q", "partition": None,
                    "consumerGroup": "g", "batch": 5, "leaseId": f"LL{step}", "autoAck": step % 2 == 0})
    log.append({"op": "dlq_replay", "now": now + 5, "dlqId": "dlq-1", "messageId": "replayed"})
    log.append({"op": "kv", "now": now + 6, "ops": [{"op": "get", "ns": "n", "key": "a"}]})
    log.append({"op": "barrier", "now": now + 7})
    return log


def run(state: TenantState, log: list[dict]) -> list[dict]:
    return [state.apply(entry) for entry in log]


def test_the_history_exercises_failures_and_the_dlq():
    state = TenantState()
    answers = run(state, entries())
    assert not any(answer.get("error") == "internal" for answer in answers)
    assert state.counters()["fired"]["dlq"] == 1
    assert len(state.dlq_list(None, 100)) >= 1
    assert state.counters()["fired"]["appended"] > 10


def test_two_states_fed_the_same_entries_answer_alike_with_identical_snapshot_bytes():
    first, second = TenantState(), TenantState()
    log = entries()
    assert run(first, log) == run(second, log)
    assert first.snapshot() == second.snapshot()


def test_snapshot_restore_and_continue_equals_continuing_at_every_step():
    log = entries()
    reference = TenantState()
    expected_answers = run(reference, log)
    expected_snapshot = reference.snapshot()
    for cut in range(0, len(log), 3):
        state = TenantState()
        run(state, log[:cut])
        restored = TenantState.restore(state.snapshot())
        assert restored.snapshot() == state.snapshot()
        assert run(restored, log[cut:]) == expected_answers[cut:]
        assert restored.snapshot() == expected_snapshot


def test_snapshot_is_a_pure_read():
    state = TenantState()
    run(state, entries()[:10])
    assert state.snapshot() == state.snapshot()


def test_timer_snapshot_bytes_do_not_depend_on_the_order_timers_were_written():
    one, two = TenantState(), TenantState()
    ops = [schedule("q", f"k{i}", 1000 + i % 3, f"t{i}") for i in range(10)]
    one.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None, "ops": ops})
    two.apply({"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
               "ops": list(reversed(ops))})
    assert one.snapshot() == two.snapshot()


def test_restore_refuses_an_unknown_format():
    import msgpack

    blob = zstandard.ZstdCompressor().compress(msgpack.packb([99, 0, False, 0, [], b"", [], []]))
    with pytest.raises(ValueError):
        TenantState.restore(blob)


@pytest.mark.parametrize("command", [
    None, [], {}, {"op": "tick"}, {"op": "tick", "now": "soon"}, {"op": "tick", "now": True},
    {"op": "warp", "now": 1}, {"op": "timers", "now": 1, "ops": "nope"},
    {"op": "push", "now": 1, "items": [None]}, {"op": "ack", "now": 1, "acknowledgments": [{}]},
    {"op": "kv", "now": 1, "ops": [[]]},
    {"op": "configure", "now": 1, "queue": "q", "options": []},
    {"op": "lease_extend", "now": 1, "leaseId": "L", "seconds": -1},
    {"op": "dlq_replay", "now": 1, "dlqId": None, "messageId": "m"},
    {"op": "pop", "now": 1, "queue": None},
])
def test_apply_answers_malformed_commands_without_raising(command):
    answer = TenantState().apply(command)
    assert answer.get("error") in {"bad_request", "timers_bad_request"}
    assert answer["message"]


def test_a_malformed_transaction_answers_success_false():
    answer = TenantState().apply({"op": "transaction", "now": 1, "operations": "x"})
    assert (answer["success"], answer["reason"]) == (False, "bad_request")


def test_a_refused_command_moves_only_the_clock():
    state = TenantState()
    run(state, entries()[:6])
    twin = TenantState.restore(state.snapshot())
    assert state.apply({"op": "warp", "now": T0 + 99_999})["error"] == "bad_request"
    twin.apply({"op": "barrier", "now": T0 + 99_999})
    assert state.snapshot() == twin.snapshot()


def test_an_unexpected_exception_is_answered_internal(monkeypatch):
    state = TenantState()

    def explode(command, now):
        raise KeyError("boom")

    monkeypatch.setitem(state._handlers, "barrier", explode)
    answer = state.apply({"op": "barrier", "now": 5})
    assert answer == {"error": "internal", "message": "KeyError: 'boom'"}


def test_state_imports_nothing_that_differs_between_replicas():
    for path in STATE_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("command", [
    {"op": "barrier", "now": -1},
    {"op": "barrier", "now": 2**53 + 1},
    {"op": "timers", "now": T0, "producerSub": "s", "maxPending": None,
     "ops": [schedule("q", "k", 2**50 + 1, "t")]},
    {"op": "tick", "now": T0, "policy": {"backoffMaxMs": 2**40 + 1}},
    {"op": "kv", "now": T0, "ops": [{"op": "put", "ns": "n", "key": "k", "value": 1,
                                     "ttlSeconds": 2**41}]},
])
def test_values_that_could_not_be_snapshotted_are_refused(command):
    state = TenantState()
    answer = state.apply(command)
    assert answer["error"] in {"bad_request", "timers_bad_request"}
    TenantState.restore(state.snapshot())


def test_a_kv_counter_cannot_leave_the_64_bit_range():
    state = TenantState()
    state.apply({"op": "kv", "now": T0, "ops": [
        {"op": "put", "ns": "n", "key": "c", "value": 2**63 - 2}]})
    assert "results" in state.apply({"op": "kv", "now": T0, "ops": [
        {"op": "incr", "ns": "n", "key": "c"}]})
    answer = state.apply({"op": "kv", "now": T0, "ops": [{"op": "incr", "ns": "n", "key": "c"}]})
    assert (answer["error"], answer["index"]) == ("bad_request", 0)
    assert TenantState.restore(state.snapshot()).kv_get("n", "c")["value"] == 2**63 - 1
