"""What a Python team expects of the SDK: absolute instants, batch schedule and ack, typed
transaction results, a must-be-pending cancel, and a wrong URL that fails in seconds."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from queen_raft.client import (AckResult, BatchInterrupted, ConnectionFailed, KvEntry, PushResult, Queen, RetryPolicy,
                               TimerResult, TimerRow)
from queen_raft.client.consumer import Message
from queen_raft.client.instants import GroupClock
from test_client_transport import FAST, ScriptedNode, refused_url


@pytest.fixture
async def node():
    started = await ScriptedNode(replies=[(200, {}, {})]).start()
    yield started
    await started.close()


@pytest.fixture
async def queen(node):
    async with Queen(urls=[node.url], token="tok", retry=FAST) as q:
        yield q


def test_a_naive_datetime_is_refused_where_it_is_written(queen):
    with pytest.raises(TypeError, match="naive datetime"):
        queen.timer("r").key("k").at(datetime(2030, 1, 1, 9, 0))


def test_an_instant_is_a_delay_on_the_group_clock_as_last_seen():
    clock = GroupClock()
    now = 1_800_000_000_000
    instant = datetime.fromtimestamp((now + 90_000) / 1000, tz=timezone.utc)
    assert clock.delay_until(instant, now_ms=now) == 90_000
    clock.observe(delay_ms=1_000, deliver_at=now + 61_000, answered_at_ms=now)  # the group runs 60 s ahead
    assert clock.delay_until(instant, now_ms=now) == 30_000


async def test_at_sends_the_delay_and_learns_the_offset_from_the_answer(node, queen):
    def answer(seen):
        op = seen.body["operations"][0]
        group_now = int(time.time() * 1000) + 60_000  # the group clock is a minute ahead of ours
        return 200, {"results": [{"ok": True, "status": "scheduled", "queue": "r", "timerKey": op["timerKey"],
                                  "txn": op["txn"], "messageId": "m", "deliverAt": group_now + op["delayMs"]}]}, {}
    node.reply = answer
    await queen.timer("r").key("a").delay("1h").payload(1).schedule()
    instant = datetime.now(timezone.utc) + timedelta(hours=2)
    await queen.timer("r").key("b").at(instant).payload(1).schedule()
    sent = node.seen[1].body["operations"][0]["delayMs"]
    assert abs(sent - (7_200_000 - 60_000)) < 2_000


async def test_schedule_many_splits_into_calls_of_256_and_keeps_the_order(node, queen):
    def answer(seen):
        return 200, {"results": [{"ok": True, "status": "scheduled", "queue": "r", "timerKey": op["timerKey"],
                                  "txn": op["txn"], "messageId": "m", "deliverAt": 1}
                                 for op in seen.body["operations"]]}, {}
    node.reply = answer
    rows = [TimerRow(key=f"k{i}", payload={"i": i}, delay="1h") for i in range(600)]
    results = await queen.timer("r").schedule_many(rows)
    assert [len(s.body["operations"]) for s in node.seen] == [256, 256, 88]
    assert [r.timer_key for r in results] == [f"k{i}" for i in range(600)]
    assert all(isinstance(r, TimerResult) for r in results)


async def test_schedule_many_refuses_a_bad_row_before_sending_anything(node, queen):
    with pytest.raises(TypeError):
        await queen.timer("r").schedule_many([TimerRow(key="a", payload=1, delay="1h"),
                                              TimerRow(key="b", payload=1, delay=3600)])  # type: ignore[arg-type]
    assert node.seen == []


def test_a_row_takes_exactly_one_of_delay_and_at():
    with pytest.raises(ValueError, match="exactly one"):
        TimerRow(key="k", payload=1)
    with pytest.raises(ValueError, match="exactly one"):
        TimerRow(key="k", payload=1, delay="1h", at=datetime.now(timezone.utc))


async def test_schedule_many_reports_the_committed_chunks_when_one_fails(node, queen):
    ok = {"results": [{"ok": True, "status": "scheduled", "queue": "r", "timerKey": "k", "txn": "t"}] * 2}
    node.replies = [(200, ok, {}), (400, {"error": "timers_bad_request", "message": "no"}, {})]
    rows = [TimerRow(key=f"k{i}", payload=1, delay="1s") for i in range(4)]
    with pytest.raises(BatchInterrupted) as caught:
        await queen.timer("r").schedule_many(rows, chunk_size=2)
    assert len(caught.value.completed) == 2 and caught.value.error.code == "timers_bad_request"


def popped(offset: int, lease: str) -> Message:
    return Message.from_wire({"transactionId": f"t{offset}", "leaseId": lease, "partition": "Default",
                              "offset": offset}, "q", "g", None)


async def test_ack_many_sends_one_call_per_lease_and_answers_in_message_order(node, queen):
    def answer(seen):
        items = seen.body["acknowledgments"]
        return 200, {"results": [{"index": i, "success": item["transactionId"] != "t2"}
                                 for i, item in enumerate(items)]}, {}
    node.reply = answer
    messages = [popped(1, "L1"), popped(2, "L2"), popped(3, "L1")]
    verdicts = await queen.ack_many(messages, "completed")
    assert sorted(s.body["leaseId"] for s in node.seen) == ["L1", "L2"]
    assert all(s.body["consumerGroup"] == "g" for s in node.seen)
    assert [v.success for v in verdicts] == [True, False, True]
    assert all(isinstance(v, AckResult) for v in verdicts)


async def test_transaction_results_are_typed_by_the_op_they_answer(node, queen):
    node.replies = [(200, {"success": True, "results": [
        {"status": "queued", "queue": "a", "partition": "Default", "transactionId": "x", "messageId": "m", "offset": 0},
        {"ns": "n", "key": "k", "found": True, "value": 1, "version": 1},
        {"ok": True, "status": "cancelled", "queue": "r", "timerKey": "k", "txn": None}]}, {})]
    result = await (queen.transaction().push("a", {"x": 1}).kv.put("n", "k", 1)
                    .timer("r").key("k").cancel(require_pending=True).commit())
    push, kv_row, cancel = result.results
    assert isinstance(push, PushResult) and isinstance(kv_row, KvEntry) and isinstance(cancel, TimerResult)
    assert cancel.status == "cancelled"
    assert node.seen[0].body["timers"] == [{"op": "cancel", "queue": "r", "timerKey": "k", "requirePending": True}]


async def test_a_wrong_url_fails_within_the_unreachable_budget():
    started = time.monotonic()
    async with Queen(urls=[refused_url()], token="t") as q:  # the default policy
        assert q.transport.connect_timeout_s == 2.0
        with pytest.raises(ConnectionFailed):
            await q.timer("r").key("k").peek()
    assert time.monotonic() - started < RetryPolicy().unreachable_budget_s + 2.5


async def test_usage_and_configure_answer_typed_results(node, queen):
    from queen_raft.client import QueueOptions, Usage
    node.replies = [(200, {"tenant": "acme", "billedMessages": 3, "pushedMessages": 2, "pendingTimers": 1,
                           "fired": {"appended": 1, "duplicate": 0, "failed": 0, "dlq": 0},
                           "schedulingPaused": True}, {}),
                    (200, {"queue": "r", "options": {"leaseTime": 60}}, {})]
    usage = await queen.usage()
    assert isinstance(usage, Usage) and (usage.billed_messages, usage.scheduling_paused) == (3, True)
    assert usage.fired["appended"] == 1
    options = await queen.configure("r", {"leaseTime": 60})
    assert isinstance(options, QueueOptions) and options.options == {"leaseTime": 60}


def test_an_instant_in_the_past_is_a_zero_delay_the_server_takes():
    """The server refuses a negative delayMs; a past instant means "fire at once", which is 0."""
    clock = GroupClock()
    now = 1_700_000_000_000
    past = datetime.fromtimestamp((now - 5_000) / 1000, tz=timezone.utc)
    assert clock.delay_until(past, now_ms=now) == 0
