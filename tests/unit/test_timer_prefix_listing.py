"""Listing a queue's timers by timerKey prefix: the state's page, the route's `?prefix=`, the SDK's
and the CLI's argument. Keyset paging (`after`, `limit`) works within the prefix."""

from __future__ import annotations

import base64

import pytest

from queen_raft.cli.main import build_parser
from queen_raft.state import TenantState
from test_api_fake_group import ApiHarness
from test_state_timers import T0, schedule, timers

KEYS = ["a", "order/1", "order/10", "order/2", "order/é", "order0", "orders/x", "z", "é"]


def state_with_keys() -> TenantState:
    state = TenantState()
    timers(state, T0, *(schedule("q", key) for key in KEYS))
    return state


def pages(state: TenantState, prefix: str | None, limit: int, after: str | None = None) -> list[list[str]]:
    listed = []
    while True:
        page = state.list_timers("q", after, limit, prefix)
        listed.append([row["timerKey"] for row in page["rows"]])
        if not page["truncated"]:
            return listed
        after = page["nextAfter"]
        assert after == listed[-1][-1]


@pytest.mark.parametrize("prefix", ["order/", "order", "orders", "é", "a", "nothing", "order/é", "z"])
@pytest.mark.parametrize("limit", [1, 2, 3, 100])
def test_pages_hold_exactly_the_keys_with_the_prefix_in_byte_order(prefix, limit):
    listed = pages(state_with_keys(), prefix, limit)
    want = sorted((k for k in KEYS if k.startswith(prefix)), key=lambda k: k.encode())
    assert [key for page in listed for key in page] == want
    assert all(len(page) <= limit for page in listed)


def test_after_and_prefix_together():
    state = state_with_keys()
    assert pages(state, "order/", 100, after="order/10") == [["order/2", "order/é"]]
    assert pages(state, "order/", 100, after="a") == [["order/1", "order/10", "order/2", "order/é"]]
    assert pages(state, "order/", 100, after="orders") == [[]]


def test_an_empty_prefix_lists_everything():
    assert [k for page in pages(state_with_keys(), "", 4) for k in page] == KEYS


PAYLOAD = base64.b64encode(b"{}").decode()


async def test_the_route_filters_by_prefix_and_pages():
    async with ApiHarness() as api:
        ops = [{"op": "schedule", "queue": "q", "timerKey": k, "delayMs": 60_000, "txn": k, "payload": PAYLOAD}
               for k in KEYS]
        await api.call("POST", "/api/v1/timers", json=ops)
        status, _, page = await api.call("GET", "/api/v1/timers/q?prefix=order%2F&limit=3", token="acme-ro")
        assert status == 200
        assert ([r["timerKey"] for r in page["rows"]], page["truncated"], page["nextAfter"]) == (
            ["order/1", "order/10", "order/2"], True, "order/2")
        _, _, page = await api.call("GET", "/api/v1/timers/q?prefix=order%2F&limit=3&after=order%2F2", token="acme-ro")
        assert ([r["timerKey"] for r in page["rows"]], page["truncated"]) == (["order/é"], False)


def test_the_cli_takes_a_prefix():
    args = build_parser().parse_args(["timer", "list", "q", "--prefix", "order/", "--all", "--url", "http://x"])
    assert (args.prefix, args.all) == ("order/", True)
