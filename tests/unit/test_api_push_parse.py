"""A push call's items parsed in one pass: messageIds minted together (one clock read, one
os.urandom), the usual names accepted without the byte count, and every refusal as before."""

from __future__ import annotations

import pytest

from queen_raft.api import ids, messages
from queen_raft.api.errors import ApiError
from queen_raft.state.limits import MAX_NAME_BYTES


def body(count: int, **extra) -> dict:
    return {"items": [{"queue": "jobs", "payload": {"n": i}, "transactionId": f"t-{i}", **extra} for i in range(count)]}


def test_a_call_mints_its_message_ids_with_one_read_of_the_random_source(monkeypatch):
    reads = []
    real = ids.os.urandom
    monkeypatch.setattr(ids.os, "urandom", lambda n: reads.append(n) or real(n))
    items = messages.parse_push_items(body(100))
    assert len(reads) == 1
    assert len({item["messageId"] for item in items}) == 100
    assert [item["transactionId"] for item in items] == [f"t-{i}" for i in range(100)]


def test_an_item_without_transaction_id_takes_its_message_id():
    item = messages.parse_push_items({"items": [{"queue": "jobs", "payload": 1}]})[0]
    assert item["transactionId"] == item["messageId"]


@pytest.mark.parametrize("raw, words", [
    ({"queue": "jobs", "payload": 1, "messageId": "m"}, "messageId is set by the server"),
    ({"queue": "jobs", "payload": 1, "_x": 1}, "_x is set by the server"),
    ({"queue": "jobs", "payload": 1, "color": "red"}, "unknown field(s) color"),
    ({"queue": "", "payload": 1}, "queue must be a non-empty string"),
    ({"queue": 7, "payload": 1}, "queue must be a non-empty string"),
    ({"payload": 1}, "queue is missing"),
    ({"queue": "j" * (MAX_NAME_BYTES + 1), "payload": 1}, f"queue is over {MAX_NAME_BYTES} bytes"),
    ({"queue": "\u00e9" * (MAX_NAME_BYTES // 2 + 1), "payload": 1}, f"queue is over {MAX_NAME_BYTES} bytes"),
    ({"queue": "jobs", "partition": "", "payload": 1}, "partition must be a non-empty string"),
])
def test_refusals_name_the_item_and_field(raw, words):
    with pytest.raises(ApiError) as refused:
        messages.parse_push_items({"items": [{"queue": "jobs", "payload": 0}, raw]})
    assert refused.value.status == 400 and "items[1]" in str(refused.value) and words in str(refused.value)
