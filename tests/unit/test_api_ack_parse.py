"""An acknowledgment of the usual shape ({partition, transactionId, status}) is read in one test of
its three fields (api/messages.py parse_ack_item); it must come out as the field-by-field checks
make it, and an item those checks refuse must still be refused with their message."""

from __future__ import annotations

import pytest

from queen_raft.api.errors import ApiError
from queen_raft.api.messages import parse_ack_item
from queen_raft.state.limits import MAX_NAME_BYTES


@pytest.mark.parametrize("status", ["completed", "failed", "retry", "dlq"])
def test_the_usual_item_reads_as_its_fields(status):
    item = parse_ack_item({"partition": "Default", "transactionId": "t-1", "status": status}, "acknowledgments[0]")
    assert item == {"partition": "Default", "status": status, "transactionId": "t-1"}
    assert list(item) == ["partition", "status", "transactionId"]  # the order the command is encoded in


@pytest.mark.parametrize("raw, message", [
    ({"partition": "", "transactionId": "t", "status": "completed"}, "partition must be a non-empty string"),
    ({"partition": "Default", "transactionId": "", "status": "completed"}, "transactionId must be a non-empty string"),
    ({"partition": "Default", "transactionId": "t", "status": "done"}, "status 'done' is not one of"),
    ({"partition": "Default", "transactionId": 7, "status": "completed"}, "transactionId must be a non-empty string"),
    ({"partition": "p" * (MAX_NAME_BYTES + 1), "transactionId": "t", "status": "completed"}, "partition is over"),
    ({"partition": "Default", "transactionId": "é" * MAX_NAME_BYTES, "status": "completed"}, "transactionId is over"),
    ({"partition": "Default", "transactionId": "t", "stat": "completed"}, "unknown field(s) stat"),
])
def test_an_item_of_three_fields_the_checks_refuse_is_still_refused(raw, message):
    with pytest.raises(ApiError) as refused:
        parse_ack_item(raw, "acknowledgments[0]")
    assert refused.value.status == 400 and message in str(refused.value)


def test_a_long_name_within_the_byte_bound_is_accepted_by_the_checks():
    txn = "t" * MAX_NAME_BYTES  # past the length the one test takes, within the bytes
    assert parse_ack_item({"partition": "Default", "transactionId": txn, "status": "completed"},
                          "acknowledgments[0]")["transactionId"] == txn
