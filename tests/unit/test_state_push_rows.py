"""The rows form of a push (docs/commands.md, queen_raft/state/push_rows.py): what the API proposes,
an entry of the older items form still applying, and the refusals of a malformed row."""

from __future__ import annotations

import msgpack
import pytest

from queen_raft.state import TenantState
from queen_raft.state.push_rows import PUSH_ROW_FIELDS
from test_api_fake_group import ApiHarness

T0 = 1_700_000_000_000
ITEM = {"queue": "q", "partition": "Default", "payload": b"x", "transactionId": "t1", "messageId": "m1",
        "traceId": None, "encrypted": False}


def shipped(command: dict) -> dict:
    return msgpack.unpackb(msgpack.packb(command, use_bin_type=True), raw=False)


def row(item: dict) -> list:
    return [item[name] for name in PUSH_ROW_FIELDS]


async def test_the_api_proposes_a_push_call_as_rows():
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/push", json={"items": [
            {"queue": "q", "payload": {"n": 1}, "transactionId": "a"}, {"queue": "q", "payload": 2, "traceId": "tr"}]})
        assert status == 201 and [r["status"] for r in body["results"]] == ["queued", "queued"]
        [command] = api.groups["acme"].writes()
        assert "items" not in command
        first, second = (r["messageId"] for r in body["results"])
        assert [list(r) for r in command["rows"]] == [["q", "Default", b'{"n":1}', "a", first, None, False],
                                                      ["q", "Default", b"2", second, second, "tr", False]]


def test_an_entry_of_the_items_form_applies_as_before_and_the_rows_form_alike():
    by_items, by_rows = TenantState(), TenantState()
    second = dict(ITEM, transactionId="t2", messageId="m2", traceId="tr")
    answer = by_items.apply(shipped({"op": "push", "now": T0, "producerSub": "s", "items": [ITEM, second, ITEM]}))
    assert [r["status"] for r in answer["results"]] == ["queued", "queued", "duplicate"]
    assert by_rows.apply(shipped({"op": "push", "now": T0, "producerSub": "s",
                                  "rows": [row(ITEM), row(second), row(ITEM)]})) == answer
    assert by_rows.snapshot() == by_items.snapshot()


@pytest.mark.parametrize("rows, index, words", [
    ("nope", None, "rows must be a list"),
    ([row(ITEM), ["q", "Default", b"x"]], 1, "array of 7 fields"),
    ([row(ITEM), ["", "Default", b"x", "t", "m", None, False]], 1, "queue must be a non-empty string"),
    ([["q", "Default", "text", "t", "m", None, False]], 0, "payload must be bytes"),
    ([["q", "Default", b"x", "t", "m", None, 1]], 0, "encrypted must be a boolean"),
])
def test_a_malformed_row_refuses_the_command_and_changes_nothing(rows, index, words):
    state = TenantState()
    answer = state.apply(shipped({"op": "push", "now": T0, "producerSub": "s", "rows": rows}))
    assert answer["error"] == "bad_request" and words in answer["message"] and answer.get("index") == index
    assert (state.broker.pushed, state.billed, state.broker.queues) == (0, 0, {})


def test_a_push_with_both_items_and_rows_is_refused():
    state = TenantState()
    answer = state.apply(shipped({"op": "push", "now": T0, "items": [ITEM], "rows": [row(ITEM)]}))
    assert answer["error"] == "bad_request" and state.broker.pushed == 0


def test_a_push_command_queues_one_dedup_expiry_per_partition_and_it_prunes_and_snapshots_per_id():
    state = TenantState()
    state.apply({"op": "configure", "now": T0, "queue": "q", "options": {"dedupWindowSeconds": 10}})
    rows = [row(dict(ITEM, transactionId=f"t{i}", messageId=f"m{i}")) for i in range(3)]
    rows.append(row(dict(ITEM, partition="eu", transactionId="e1", messageId="me1")))
    state.apply(shipped({"op": "push", "now": T0, "producerSub": "s", "rows": rows}))
    default = state.broker.queues["q"].partitions["Default"]
    assert list(default.dedup_expiry) == [(T0 + 10_000, ["t0", "t1", "t2"])]
    restored = TenantState.restore(state.snapshot())
    assert list(restored.broker.queues["q"].partitions["Default"].dedup_expiry) == \
        [(T0 + 10_000, "t0"), (T0 + 10_000, "t1"), (T0 + 10_000, "t2")]
    assert restored.snapshot() == state.snapshot()
    for replica in (state, restored):
        later = replica.apply(shipped({"op": "push", "now": T0 + 10_000, "producerSub": "s", "rows": rows[:1]}))
        assert later["results"][0]["status"] == "queued"  # the window ended: t0 is new again
        assert set(replica.broker.queues["q"].partitions["Default"].dedup) == {"t0"}
    assert restored.snapshot() == state.snapshot()
