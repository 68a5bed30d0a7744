"""A KV op whose `op` is not a string (a list, an object) is 400 bad_request naming the op, on the
KV batch and inside a transaction, not a 500 (the fuzz run found it: an unhashable value was
looked up in the table of op kinds)."""

from __future__ import annotations

import pytest

from test_api_fake_group import ApiHarness


@pytest.mark.parametrize("kind", [["put"], {"op": "put"}])
async def test_a_kv_op_kind_that_is_not_a_string_is_a_bad_request(kind):
    async with ApiHarness() as api:
        status, _, body = await api.call("POST", "/api/v1/kv", json={"ops": [{"op": kind, "ns": "n", "key": "k"}]})
        assert status == 400 and body["error"] == "bad_request" and "op must be one of" in body["message"], body
        status, _, body = await api.call("POST", "/api/v1/transaction", json={"kv": [{"op": kind, "ns": "n", "key": "k"}]})
        assert status == 400 and body["success"] is False and body["reason"] == "bad_request", body
        assert api.groups["acme"].writes() == []
