"""GET /api/v1/dlq pages: the contract's route with an `after` cursor, `truncated` and `nextAfter`."""

from __future__ import annotations

from test_api_fake_group import ApiHarness


async def dead_letter(api: ApiHarness, queue: str, txn: str) -> None:
    """Pushes one message to `queue`, pops it and files it in the DLQ by ack."""
    await api.call("POST", "/api/v1/push", json={"items": [{"queue": queue, "payload": 1, "transactionId": txn}]})
    status, _, popped = await api.call("GET", f"/api/v1/pop/queue/{queue}")
    assert status == 200 and [m["transactionId"] for m in popped["messages"]] == [txn]
    _, _, body = await api.call("POST", "/api/v1/ack/batch", json={
        "leaseId": popped["leaseId"], "acknowledgments": [{"transactionId": txn, "status": "dlq"}]})
    assert body["results"][0]["dlq"] is True


async def listing(api: ApiHarness, query: str) -> dict:
    status, _, body = await api.call("GET", f"/api/v1/dlq?{query}", token="acme-ro")
    assert status == 200, body
    return body


async def test_pages_in_filing_order_across_queues_follow_next_after():
    async with ApiHarness() as api:
        for queue, txn in [("zeta", "z1"), ("alpha", "a1"), ("zeta", "z2"), ("alpha", "a2"), ("mid", "m1")]:
            await dead_letter(api, queue, txn)
        first = await listing(api, "limit=2")
        assert [r["transactionId"] for r in first["rows"]] == ["z1", "a1"]
        assert (first["truncated"], first["nextAfter"]) == (True, first["rows"][1]["dlqId"])
        second = await listing(api, f"limit=2&after={first['nextAfter']}")
        assert [r["transactionId"] for r in second["rows"]] == ["z2", "a2"] and second["truncated"] is True
        last = await listing(api, f"limit=2&after={second['nextAfter']}")
        assert [r["transactionId"] for r in last["rows"]] == ["m1"] and (last["truncated"], last["nextAfter"]) == (False, None)
        alpha = await listing(api, f"queue=alpha&after={first['rows'][0]['dlqId']}")
        assert [r["transactionId"] for r in alpha["rows"]] == ["a1", "a2"] and alpha["truncated"] is False


async def test_a_replayed_cursor_row_still_continues_the_listing():
    async with ApiHarness() as api:
        for txn in ["m0", "m1", "m2"]:
            await dead_letter(api, "q", txn)
        first = await listing(api, "queue=q&limit=1")
        status, _, _ = await api.call("POST", f"/api/v1/dlq/{first['nextAfter']}/replay")
        assert status == 200
        rest = await listing(api, f"queue=q&after={first['nextAfter']}")
        assert [r["transactionId"] for r in rest["rows"]] == ["m1", "m2"]


async def test_a_bad_cursor_is_400_and_an_empty_one_is_no_cursor():
    async with ApiHarness() as api:
        await dead_letter(api, "q", "m0")
        for bad in ("17", "dlq-", "dlq-x", "DLQ-1"):
            status, _, body = await api.call("GET", f"/api/v1/dlq?after={bad}", token="acme-ro")
            assert (status, body["error"]) == (400, "bad_request"), bad
        assert len((await listing(api, "after="))["rows"]) == 1
        assert (await listing(api, "after=dlq-1")) == {"rows": [], "truncated": False, "nextAfter": None}
