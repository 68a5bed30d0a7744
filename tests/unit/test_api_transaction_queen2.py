"""POST /api/v1/transaction as Queen 2.x clients send it: a push of several `items`, and
`requiredLeases`; over a real app and a real TenantState."""

from __future__ import annotations

import pytest

from queen_raft.state import TenantState
from test_api_fake_group import ApiHarness
from test_api_transaction import delivered, digest


async def test_a_push_of_several_items_takes_one_place_per_item_in_the_results():
    async with ApiHarness() as api:
        popped = await delivered(api, group="g")
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "push", "items": [{"queue": "audit", "payload": {"n": 1}},
                                       {"queue": "audit", "partition": "p2", "payload": "two", "transactionId": "t2"}]},
            {"type": "ack", "consumerGroup": "g", "leaseId": popped["leaseId"], "transactionId": "m1",
             "status": "completed"},
            {"type": "push", "queue": "audit", "payload": 3, "transactionId": "t3"}],
            "kv": [{"op": "put", "ns": "n", "key": "k", "value": 1}]})
        assert (status, body["success"]) == (200, True)
        first, second, ack, third, kv_row = body["results"]
        assert (first["queue"], first["partition"], first["status"], first["index"]) == ("audit", "Default", "queued", 0)
        assert (second["partition"], second["transactionId"], second["index"]) == ("p2", "t2", 1)
        assert (ack["index"], ack["success"]) == (2, True)
        assert (third["transactionId"], third["index"]) == ("t3", 3)
        assert kv_row["value"] == 1
        state = api.groups["acme"].state
        assert state.counters()["billedMessages"] == 4  # the delivered message and the three pushes


async def test_a_duplicate_among_the_items_rolls_back_with_the_item_s_place():
    async with ApiHarness() as api:
        before = digest(api)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"operations": [
            {"type": "push", "items": [{"queue": "q", "payload": 1, "transactionId": "t"},
                                       {"queue": "q", "payload": 2, "transactionId": "t"}]}]})
        assert (status, body["success"], body["reason"], body["index"]) == (200, False, "duplicate", 1)
        assert digest(api) == before


BAD_QUEEN2_TRANSACTIONS = {
    # case: (body, index, words the message must hold)
    "items empty": ({"operations": [{"type": "push", "items": []}]}, 0, "operations[0].items"),
    "items not an array": ({"operations": [{"type": "push", "items": {"queue": "q"}}]}, 0, "operations[0].items"),
    "items beside a queue": ({"operations": [{"type": "push", "queue": "q", "items": [{"queue": "q", "payload": 1}]}]},
                             0, "operations[0]: a push with items takes no other field: queue"),
    "item without queue": ({"operations": [{"type": "push", "items": [{"queue": "q", "payload": 1}, {"payload": 2}]}]},
                           1, "operations[0].items[1]: queue is missing"),
    "item not an object": ({"operations": [{"type": "ack", "leaseId": "l", "offset": 0},
                                           {"type": "push", "items": ["q"]}]}, 1, "operations[1].items[0]"),
    "item with a type": ({"operations": [{"type": "push", "items": [{"type": "push", "queue": "q", "payload": 1}]}]},
                         0, "operations[0].items[0]: unknown field(s) type"),
    "item with a bad partition": ({"operations": [{"type": "push", "items": [{"queue": "q", "partition": 7, "payload": 1}]}]},
                                  0, "operations[0].items[0]: partition"),
    "item server-owned": ({"operations": [{"type": "push", "items": [{"queue": "q", "payload": 1, "messageId": "m"}]}]},
                          0, "operations[0].items[0]: messageId"),
    "items over the cap": ({"operations": [{"type": "push", "items": [{"queue": "q", "payload": i} for i in range(4096)]}],
                            "kv": [{"op": "get", "ns": "n", "key": "k"}]}, None, "4097 items is over the cap of 4096"),
    "requiredLeases not an array": ({"operations": [{"type": "push", "queue": "q", "payload": 1}], "requiredLeases": "l"},
                                    None, "requiredLeases must be an array"),
    "requiredLeases with an empty id": ({"operations": [{"type": "push", "queue": "q", "payload": 1}],
                                         "requiredLeases": ["l", ""]}, None, "requiredLeases[1]"),
    "requiredLeases with a number": ({"operations": [{"type": "push", "queue": "q", "payload": 1}],
                                      "requiredLeases": [5]}, None, "requiredLeases[0]"),
    "requiredLeases over the cap": ({"operations": [{"type": "push", "queue": "q", "payload": 1}],
                                     "requiredLeases": ["l"] * 4097}, None, "requiredLeases: 4097"),
}


@pytest.mark.parametrize("case", sorted(BAD_QUEEN2_TRANSACTIONS))
async def test_a_bad_queen2_shape_is_400_naming_the_field_and_proposes_nothing(case):
    body, index, words = BAD_QUEEN2_TRANSACTIONS[case]
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/transaction", json=body)
        assert (status, answer["error"], answer["reason"], answer["success"]) == (400, "bad_request", "bad_request", False)
        assert answer.get("index") == index
        assert words in answer["message"]
        assert api.groups["acme"].writes() == []


async def test_a_transaction_commits_while_its_required_lease_is_alive():
    async with ApiHarness() as api:
        popped = await delivered(api)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "push", "items": [{"queue": "next", "payload": {"step": 2}}]}],
            "requiredLeases": [popped["leaseId"]]})
        assert (status, body["success"]) == (200, True)
        assert api.groups["acme"].state.deliverable("next", None, "__QUEUE_MODE__")


async def test_a_required_lease_not_alive_is_rejected_ack_and_changes_nothing():
    async with ApiHarness() as api:
        popped = await delivered(api)
        lease_id = popped["leaseId"]
        transaction = {"operations": [{"type": "push", "queue": "next", "payload": 1}],
                       "kv": [{"op": "incr", "ns": "n", "key": "k", "by": 1}], "requiredLeases": [lease_id]}
        status, _, acked = await api.call("POST", "/api/v1/ack", json={
            "leaseId": lease_id, "transactionId": "m1", "status": "completed"})
        assert status == 200 and acked["results"][0]["success"] is True  # released by its ack
        before = digest(api)
        for required in ([lease_id], ["never-issued"]):
            status, _, body = await api.call("POST", "/api/v1/transaction", json={**transaction, "requiredLeases": required})
            assert (status, body["success"], body["reason"]) == (200, False, "rejected_ack")
            assert required[0] in body["error"] and "not alive" in body["error"]
            assert digest(api) == before


async def test_an_expired_required_lease_is_rejected_ack():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/configure", json={"queue": "orders", "options": {"leaseTime": 1}})
        popped = await delivered(api)
        api.groups["acme"].advance(1_000)
        status, _, body = await api.call("POST", "/api/v1/transaction", json={
            "operations": [{"type": "push", "queue": "next", "payload": 1}], "requiredLeases": [popped["leaseId"]]})
        assert (status, body["success"], body["reason"]) == (200, False, "rejected_ack")
        assert not api.groups["acme"].state.deliverable("next", None, "__QUEUE_MODE__")


async def test_required_leases_need_read_write_and_an_empty_list_is_none():
    async with ApiHarness() as api:
        push = {"operations": [{"type": "push", "queue": "q", "payload": 1}]}
        status, _, _ = await api.call("POST", "/api/v1/transaction", token="acme-wo", json={**push, "requiredLeases": ["l"]})
        assert status == 403
        status, _, body = await api.call("POST", "/api/v1/transaction", token="acme-wo", json={**push, "requiredLeases": []})
        assert (status, body["success"]) == (200, True)
        assert "requiredLeases" not in api.groups["acme"].writes()[-1]


def test_the_state_refuses_a_malformed_required_leases_command_and_changes_nothing():
    state = TenantState()
    image = state.snapshot()
    for required in ("L1", [1], [None]):
        answer = state.apply({"op": "transaction", "now": 0, "producerSub": "s", "requiredLeases": required,
                              "operations": [], "kv": [{"op": "incr", "ns": "n", "key": "k", "by": 1}], "timers": []})
        assert (answer["success"], answer["reason"]) == (False, "bad_request")
    assert state.snapshot() == image
