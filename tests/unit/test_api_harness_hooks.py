"""The test-hooks clock route: there only with QUEEN_TEST_HOOKS=1, admin only, moves this node's clock."""

from __future__ import annotations

import pytest

from queen_raft import clock
from queen_raft.api.harness_hooks import CLOCK_PATH, MAX_TEST_CLOCK_OFFSET_MS
from queen_raft.api.openapi import document, response_schema
from test_api_fake_group import ApiHarness


@pytest.fixture
def hooks_on(monkeypatch):
    monkeypatch.setenv(clock.TEST_HOOKS_ENV, "1")
    monkeypatch.delenv(clock.TEST_CLOCK_OFFSET_ENV, raising=False)
    # Restored after the test: the offset is process-wide and other tests read the clock.
    monkeypatch.setattr(clock, "_offset_ms", 0)


@pytest.fixture
def hooks_off(monkeypatch):
    monkeypatch.delenv(clock.TEST_HOOKS_ENV, raising=False)
    monkeypatch.delenv(clock.TEST_CLOCK_OFFSET_ENV, raising=False)
    monkeypatch.setattr(clock, "_offset_ms", 0)


async def test_without_the_flag_the_route_does_not_exist(hooks_off):
    async with ApiHarness() as api:
        for method, body in (("POST", {"offsetMs": 5000}), ("GET", None)):
            status, _, answer = await api.call(method, CLOCK_PATH, token="acme-admin", json=body)
            assert (status, answer["error"]) == (404, "not_found")
        assert clock.offset_ms() == 0


async def test_with_the_flag_an_admin_moves_the_clock_and_reads_it_back(hooks_on):
    async with ApiHarness() as api:
        before = clock.wall_ms()
        status, _, answer = await api.call("POST", CLOCK_PATH, token="acme-admin", json={"offsetMs": 65_536})
        assert (status, answer["node"], answer["offsetMs"]) == (200, "n1", 65_536)
        assert clock.offset_ms() == 65_536
        assert answer["wallMs"] - before >= 65_536
        status, _, answer = await api.call("GET", CLOCK_PATH, token="globex-admin")
        assert (status, answer["offsetMs"]) == (200, 65_536)
        status, _, answer = await api.call("POST", CLOCK_PATH, token="acme-admin", json={"offsetMs": -4})
        assert (status, answer["offsetMs"], clock.offset_ms()) == (200, -4, -4)


@pytest.mark.parametrize("token, status, error", [
    (None, 401, "unauthorized"), ("acme-rw", 403, "forbidden"), ("acme-ro", 403, "forbidden"),
    ("acme-wo", 403, "forbidden"),
])
async def test_only_admin_tokens_may_move_the_clock(hooks_on, token, status, error):
    async with ApiHarness() as api:
        answer_status, _, answer = await api.call("POST", CLOCK_PATH, token=token, json={"offsetMs": 1000})
        assert (answer_status, answer["error"]) == (status, error)
        assert clock.offset_ms() == 0


@pytest.mark.parametrize("body", [
    {}, {"offsetMs": "1000"}, {"offsetMs": 1.5}, {"offsetMs": True}, {"offsetMs": 1, "extra": 2},
    {"offsetMs": MAX_TEST_CLOCK_OFFSET_MS + 1}, {"offsetMs": -MAX_TEST_CLOCK_OFFSET_MS - 1}, [1000],
])
async def test_bad_bodies_are_400_and_leave_the_clock(hooks_on, body):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", CLOCK_PATH, token="acme-admin", json=body)
        assert (status, answer["error"]) == (400, "bad_request")
        assert clock.offset_ms() == 0


def test_the_route_is_not_in_the_public_document_but_its_answers_are_described():
    assert CLOCK_PATH not in document()["paths"]
    assert not any("/test/" in path for path in document()["paths"])
    assert response_schema(CLOCK_PATH, "POST", 200)["required"] == ["node", "offsetMs", "wallMs"]
