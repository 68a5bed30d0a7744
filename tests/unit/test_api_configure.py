"""POST /api/v1/configure refuses bad options with 400 bad_request before anything is proposed."""

from __future__ import annotations

import pytest

from test_api_fake_group import ApiHarness

BAD_OPTIONS = {
    # Past 64 bits: no command encoding takes it (the OpenAPI fuzz found this one as a 500).
    "an integer past 64 bits": {"retryLimit": 2**70},
    "a negative integer past 64 bits": {"leaseTime": -(2**64)},
    "an unknown option past 64 bits": {"color": 2**80},
    "a string for an integer": {"retryLimit": "5"},
    "a bool for an integer": {"retryLimit": True},
    "an unknown option": {"color": "red"},
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
async def test_bad_options_are_400_and_nothing_is_proposed(case):
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/configure", json={"queue": "q", "options": BAD_OPTIONS[case]})
        assert (status, answer["error"]) == (400, "bad_request"), answer
        assert api.groups["acme"].writes() == []


async def test_good_options_are_applied():
    async with ApiHarness() as api:
        status, _, answer = await api.call("POST", "/api/v1/configure", json={"queue": "q", "options": {"retryLimit": 2}})
        assert (status, answer["options"]["retryLimit"]) == (200, 2), answer
