"""Timers: statuses, refusals, quota, peek and list (docs/commands.md, `timers`)."""

from __future__ import annotations

import pytest

from queen_raft.state import TenantState
from queen_raft.state.timer_entries import timer_of
from queen_raft.state.timers import T_KEY

T0 = 1_700_000_000_000


def schedule(queue: str, key: str, delay: int = 10_000, txn: str | None = None,
             payload: bytes = b"body", op: str = "schedule", **extra) -> dict:
    command = {"op": op, "queue": queue, "timerKey": key, "partition": "Default",
               "delayMs": delay, "txn": txn or f"txn-{key}", "messageId": f"mid-{key}-{txn}",
               "payload": payload, "payloadZstd": False, "encrypted": False}
    command.update(extra)
    return command


def cancel(queue: str, key: str, txn: str | None = None) -> dict:
    return {"op": "cancel", "queue": queue, "timerKey": key, "txn": txn}


def timers(state: TenantState, now: int, *ops: dict, max_pending: int | None = None,
           sub: str = "sub-1") -> dict:
    return state.apply({"op": "timers", "now": now, "producerSub": sub, "maxPending": max_pending,
                        "ops": list(ops)})


def test_schedule_answers_scheduled_with_deliver_at_on_the_group_clock():
    state = TenantState()
    answer = timers(state, T0, schedule("q", "k", delay=5000, txn="t1"))
    assert answer == {"results": [{"ok": True, "status": "scheduled", "queue": "q",
                                   "timerKey": "k", "txn": "t1", "messageId": "mid-k-t1",
                                   "deliverAt": T0 + 5000}]}
    assert state.next_due_at() == T0 + 5000
    assert state.counters()["pendingTimers"] == 1


def test_group_clock_never_runs_backwards():
    state = TenantState()
    timers(state, T0, schedule("q", "a", delay=0 + 100))
    answer = timers(state, T0 - 50_000, schedule("q", "b", delay=100))
    assert answer["results"][0]["deliverAt"] == T0 + 100
    assert state.clock == T0


def test_reschedule_replaces_txn_message_id_attempts_and_keeps_created_at():
    state = TenantState()
    timers(state, T0, schedule("q", "k", delay=1000, txn="t1"))
    answer = timers(state, T0 + 10, schedule("q", "k", delay=9000, txn="t2", op="reschedule"))
    result = answer["results"][0]
    assert (result["status"], result["txn"], result["deliverAt"]) == ("rescheduled", "t2", T0 + 9010)
    peek = state.peek_timer("q", "k")
    assert (peek["txn"], peek["messageId"], peek["attempts"], peek["lastError"]) == \
        ("t2", "mid-k-t2", 0, None)
    assert (peek["createdAt"], peek["updatedAt"]) == (T0, T0 + 10)
    assert state.next_due_at() == T0 + 9010
    assert state.counters()["pendingTimers"] == 1


def test_schedule_on_an_existing_key_is_the_same_upsert():
    state = TenantState()
    timers(state, T0, schedule("q", "k", txn="t1"))
    assert timers(state, T0, schedule("q", "k", txn="t2"))["results"][0]["status"] == "rescheduled"


def test_cancel_answers_cancelled_and_echoes_the_request_txn():
    state = TenantState()
    timers(state, T0, schedule("q", "k", txn="t1"))
    answer = timers(state, T0, cancel("q", "k", txn="client-txn"))
    assert answer["results"] == [{"ok": True, "status": "cancelled", "queue": "q",
                                  "timerKey": "k", "txn": "client-txn", "requestTxn": "client-txn"}]
    assert state.peek_timer("q", "k") is None
    assert state.next_due_at() is None


def test_cancel_without_txn_echoes_the_removed_timers_txn():
    state = TenantState()
    timers(state, T0, schedule("q", "k", txn="t1"))
    assert timers(state, T0, cancel("q", "k"))["results"][0]["txn"] == "t1"


@pytest.mark.parametrize("txn", [None, "echo-me"])
def test_cancel_of_a_missing_timer_is_absent_with_the_txn_echoed(txn):
    state = TenantState()
    answer = timers(state, T0, cancel("q", "nope", txn=txn))
    assert answer["results"] == [{"ok": False, "status": "absent", "queue": "q",
                                  "timerKey": "nope", "txn": txn, "requestTxn": txn}]


def test_cancel_after_the_fire_answers_fired():
    state = TenantState()
    timers(state, T0, schedule("q", "k", delay=10))
    state.apply({"op": "tick", "now": T0 + 10})
    assert timers(state, T0 + 11, cancel("q", "k"))["results"][0]["status"] == "fired"


def test_results_come_in_input_order():
    state = TenantState()
    timers(state, T0, schedule("q", "b"))
    answer = timers(state, T0, schedule("q", "c"), cancel("q", "b"), cancel("q", "zz"),
                    schedule("q", "a"))
    assert [(r["timerKey"], r["status"]) for r in answer["results"]] == \
        [("c", "scheduled"), ("b", "cancelled"), ("zz", "absent"), ("a", "scheduled")]


def test_the_same_key_twice_in_one_command_is_refused_and_changes_nothing():
    state = TenantState()
    before = state.snapshot()
    answer = timers(state, 0, schedule("q", "k"), cancel("q", "k"))
    assert answer["error"] == "timers_bad_request"
    assert answer["index"] == 1
    assert state.snapshot() == before


@pytest.mark.parametrize("bad_op", [
    {"op": "explode", "queue": "q", "timerKey": "k"},
    {"op": "schedule", "queue": "", "timerKey": "k"},
    schedule("q", "k", delay="10"),
    schedule("q", "k", delay=True),
    schedule("q", "k", payload="not bytes"),
    schedule("q", "k", txn=None) | {"txn": None},
    schedule("q", "k", payloadZstd="yes"),
    {"op": "cancel", "queue": "q", "timerKey": "k", "txn": 5},
])
def test_malformed_ops_refuse_the_whole_batch(bad_op):
    state = TenantState()
    answer = timers(state, T0, schedule("q", "good"), bad_op)
    assert answer["error"] == "timers_bad_request"
    assert answer["index"] == 1
    assert state.peek_timer("q", "good") is None


def test_quota_refuses_a_batch_that_adds_past_max_pending_and_changes_nothing():
    state = TenantState()
    timers(state, T0, schedule("q", "a"), schedule("q", "b"))
    before = state.snapshot()
    answer = timers(state, T0, schedule("q", "c"), max_pending=2)
    assert answer["error"] == "timers_quota_exceeded"
    assert state.snapshot() == before
    assert state.counters()["billedMessages"] == 2


def test_quota_counts_cancels_of_the_same_batch():
    state = TenantState()
    timers(state, T0, schedule("q", "a"), schedule("q", "b"))
    answer = timers(state, T0, cancel("q", "a"), schedule("q", "c"), max_pending=2)
    assert [r["status"] for r in answer["results"]] == ["cancelled", "scheduled"]


def test_quota_never_refuses_replacing_or_cancelling():
    state = TenantState()
    timers(state, T0, schedule("q", "a"), schedule("q", "b"), schedule("q", "c"))
    answer = timers(state, T0, schedule("q", "a", txn="new"), cancel("q", "b"), max_pending=1)
    assert [r["status"] for r in answer["results"]] == ["rescheduled", "cancelled"]


def test_quota_allows_reaching_exactly_max_pending():
    state = TenantState()
    answer = timers(state, T0, schedule("q", "a"), schedule("q", "b"), max_pending=2)
    assert "error" not in answer


def test_metering_bills_schedules_and_reschedules_not_cancels():
    state = TenantState()
    timers(state, T0, schedule("q", "a"), schedule("q", "b"))
    timers(state, T0, schedule("q", "a", txn="t9"), cancel("q", "b"), cancel("q", "zz"))
    state.apply({"op": "tick", "now": T0 + 10_000})
    assert state.counters()["billedMessages"] == 3


def test_paused_scheduling_refuses_schedules_in_log_order_and_lets_cancels_pass():
    state = TenantState()
    timers(state, T0, schedule("q", "held"))
    assert state.apply({"op": "admin", "now": T0, "action": "pause"}) == {"paused": True}
    assert state.scheduling_paused
    before = state.snapshot()
    refused = timers(state, T0, cancel("q", "held"), schedule("q", "k"))
    assert refused["error"] == "timers_disabled" and "results" not in refused
    assert state.snapshot() == before  # refused whole: the cancel beside the schedule did nothing
    inside = state.apply({"op": "transaction", "now": T0, "operations": [], "kv": [],
                          "timers": [schedule("q", "t")]})
    assert inside["success"] is False and inside["reason"] == "timers_disabled"
    assert state.snapshot() == before
    assert timers(state, T0, cancel("q", "held"))["results"][0]["status"] == "cancelled"
    assert state.apply({"op": "admin", "now": T0, "action": "resume"}) == {"paused": False}
    assert timers(state, T0, schedule("q", "k"))["results"][0]["status"] == "scheduled"
    assert state.apply({"op": "admin", "now": T0, "action": "nap"})["error"] == "bad_request"


def test_peek_shows_every_field_with_the_payload_as_stored():
    state = TenantState()
    timers(state, T0, schedule("q", "tenant/42", delay=70, txn="t1", payload=b"\x00\xff",
                               partition="p1", payloadZstd=False, encrypted=True), sub="alice")
    assert state.peek_timer("q", "tenant/42") == {
        "found": True, "queue": "q", "timerKey": "tenant/42", "partition": "p1",
        "deliverAt": T0 + 70, "dueAt": T0 + 70, "txn": "t1", "messageId": "mid-tenant/42-t1",
        "payload": b"\x00\xff", "payloadZstd": False, "encrypted": True, "producerSub": "alice",
        "attempts": 0, "lastError": None, "claimed": False, "createdAt": T0, "updatedAt": T0}
    assert state.peek_timer("q", "other") is None
    assert state.peek_timer("nope", "tenant/42") is None


def test_list_orders_keys_as_utf8_bytes_with_an_exclusive_cursor():
    state = TenantState()
    keys = ["b", "a", "é", "z", "A", "a/1", "😀"]
    timers(state, T0, *(schedule("q", key) for key in keys))
    everything = state.list_timers("q", None, 1000)
    listed = [row["timerKey"] for row in everything["rows"]]
    assert listed == sorted(keys, key=lambda key: key.encode("utf-8"))
    assert everything["truncated"] is False and everything["nextAfter"] is None
    assert "payload" not in everything["rows"][0]
    page = state.list_timers("q", "a", 2)
    assert [row["timerKey"] for row in page["rows"]] == ["a/1", "b"]
    assert page == {**page, "truncated": True, "nextAfter": "b"}


def test_list_pages_through_every_key_exactly_once():
    state = TenantState()
    timers(state, T0, *(schedule("q", f"k{i:03d}") for i in range(25)))
    seen, after = [], None
    while True:
        page = state.list_timers("q", after, 10)
        seen += [row["timerKey"] for row in page["rows"]]
        if not page["truncated"]:
            break
        after = page["nextAfter"]
    assert seen == [f"k{i:03d}" for i in range(25)]


@pytest.mark.parametrize("limit,expected", [(None, 100), (0, 1), (-5, 1), (5000, 1000), (7, 7)])
def test_list_limit_defaults_to_100_and_is_clamped_to_1_1000(limit, expected):
    state = TenantState()
    for start in range(0, 1200, 256):
        timers(state, T0, *(schedule("q", f"k{i:05d}") for i in range(start, min(start + 256, 1200))))
    page = state.list_timers("q", None, limit)
    assert len(page["rows"]) == expected
    assert page["truncated"] is True


def test_list_of_an_unknown_queue_is_empty():
    assert TenantState().list_timers("nope", None, 10) == {"rows": [], "truncated": False,
                                                           "nextAfter": None}


def test_timers_are_per_queue():
    state = TenantState()
    timers(state, T0, schedule("q1", "k", txn="a"), schedule("q2", "k", txn="b"))
    timers(state, T0, cancel("q1", "k"))
    assert state.peek_timer("q2", "k")["txn"] == "b"
    assert [row["timerKey"] for row in state.list_timers("q1", None, 10)["rows"]] == []


def test_pending_timers_leave_the_cyclic_collector_alone():
    """A million pending timers must not be walked by every full collection (timers.py layout):
    each timer, scheduled, rescheduled, failed back into the table or restored, is stored as one
    bytes entry, which the collector never tracks."""
    import gc

    state = TenantState()
    timers(state, T0, schedule("q", "plain"), schedule("q", "moved"),
           schedule("q", "broken", delay=0, payloadZstd=True))
    timers(state, T0, schedule("q", "moved", delay=99, op="reschedule"))
    restored = TenantState.restore(state.snapshot())
    # Two collections: a failed timer holds its retry tuple (itself atoms), and a collection may
    # look at the timer before it has untracked the retry tuple; the next one untracks both.
    gc.collect()
    gc.collect()
    for table in (state.timers, restored.timers):
        assert len(table.due) == 3
        for entry in table.due:
            assert type(entry) is bytes and not gc.is_tracked(entry)
            assert table.by_queue["q"][timer_of(entry)[T_KEY]] is entry
    assert state.peek_timer("q", "broken")["attempts"] == 1
