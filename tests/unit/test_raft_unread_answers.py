"""A replica applying an entry it did not propose leaves out the per-row result maps nobody reads
(queen_raft/raft/replicated_state.py); the state it reaches is the same, byte for byte, and an entry
of its own (proposed here, answer pending) is answered in full."""

from __future__ import annotations

from queen_raft.raft.replicated_state import ReplicatedTenantState, encode_command
from queen_raft.raft.proposal_batch import encode_batch
from queen_raft.state import TenantState
from queen_raft.state.timer_ops import ROW_FIELDS

T0 = 1_700_000_000_000


def rows(prefix: str, count: int, delay: int = 60_000) -> list[list]:
    ops = [{"queue": "q", "timerKey": f"{prefix}{i}", "partition": "Default", "delayMs": delay, "txn": f"{prefix}{i}",
            "messageId": f"m-{prefix}{i}", "payload": b"x", "payloadZstd": False, "encrypted": False}
           for i in range(count)]
    return [[op[name] for name in ROW_FIELDS] for op in ops]


def entries() -> list[bytes]:
    schedule = {"op": "timers", "now": T0, "producerSub": "p",
                "ops": [{"op": "schedule_rows", "rows": rows("k", 5) + rows("due", 2, delay=0)},
                        {"op": "cancel", "queue": "q", "timerKey": "gone", "txn": None}]}
    push = {"op": "push", "now": T0 + 1, "producerSub": "p", "items": [
        {"queue": "jobs", "partition": "Default", "payload": b"p", "transactionId": f"t{i}", "messageId": f"m{i}",
         "traceId": None, "encrypted": False} for i in (1, 2, 1)]}
    return [encode_command(schedule), encode_batch([encode_command(push), encode_command({"op": "barrier", "now": T0 + 2})])]


def replica(skip: bool) -> ReplicatedTenantState:
    consumer = ReplicatedTenantState(TenantState, TenantState.restore, lambda _due: None)
    consumer.skip_unread_answers = skip
    return consumer


def applied(consumer: ReplicatedTenantState) -> list:
    return [consumer.apply(entry, _doApply=True) for entry in entries()]  # as pysyncobj runs it on each replica


def test_a_follower_applies_the_same_state_without_the_row_answers():
    full, follower = replica(skip=False), replica(skip=True)
    answers, follower_answers = applied(full), applied(follower)

    assert follower.state.snapshot() == full.state.snapshot()
    assert len(answers[0]["results"]) == 8 and answers[0]["results"][7]["status"] == "absent"
    assert len(answers[1][0]["results"]) == 3 and answers[1][0]["results"][2]["status"] == "duplicate"
    # Only the per-row maps are left out; a cancel (rare, and it reads the fired memory) still answers.
    assert [r["status"] for r in follower_answers[0]["results"]] == ["absent"]
    assert follower_answers[1][0] == {"results": []}
    assert follower_answers[1][1] == answers[1][1]


def test_while_an_own_proposal_is_unanswered_every_apply_answers_in_full():
    full, proposer = replica(skip=False), replica(skip=True)
    answers = applied(full)
    proposer.submitted = 1  # an entry of this node's own is in flight: its answer is read
    assert applied(proposer) == answers
    proposer.answered = 1
    assert applied(replica(skip=True))[1][0] == {"results": []}


def test_submit_counts_an_entry_in_and_its_answer_out(monkeypatch):
    consumer = replica(skip=True)
    callbacks = []
    monkeypatch.setattr(consumer, "apply", lambda entry, callback: callbacks.append(callback))
    heard = []
    consumer.submit(b"entry", lambda result, error: heard.append((result, error)))
    assert (consumer.submitted, consumer.answered) == (1, 0)
    callbacks[0]({"ok": 1}, 0)
    assert (consumer.submitted, consumer.answered) == (1, 1) and heard == [({"ok": 1}, 0)]

    def refused(entry, callback):
        raise RuntimeError("not queued")

    monkeypatch.setattr(consumer, "apply", refused)
    try:
        consumer.submit(b"entry", lambda result, error: None)
    except RuntimeError:
        pass
    assert consumer.submitted == consumer.answered  # nothing of ours left in flight
