"""/health says unhealthy, with the problem, for a group that does not apply what it commits, that
could not load its state, whose journal cannot write, or that cannot store a new Raft term; never
"healthy" with a stale state."""

from __future__ import annotations

from queen_raft.api.health import APPLY_STALL_S, APPLY_WATCH_KEY
from test_api_fake_group import ApiHarness


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def set_status(api: ApiHarness, tenant: str, **fields) -> None:
    group = api.groups[tenant]
    base = type(group).status(group)
    group.status = lambda: {**base, **fields}


def fake_clock(api: ApiHarness) -> FakeClock:
    clock = FakeClock()
    api.client.server.app[APPLY_WATCH_KEY]._clock = clock
    return clock


async def health(api: ApiHarness) -> tuple[int, dict]:
    status, _, body = await api.call("GET", "/health", token=None)
    return status, body


async def test_applied_index_stuck_behind_commit_is_unhealthy_after_the_stall_time():
    async with ApiHarness() as api:
        clock = fake_clock(api)
        set_status(api, "acme", commitIndex=50, appliedIndex=1)
        status, body = await health(api)
        assert status == 200 and body["groups"]["acme"]["problem"] is None  # the first sight starts the clock
        clock.now += APPLY_STALL_S - 0.5
        assert (await health(api))[0] == 200
        clock.now += 1.0
        status, body = await health(api)
        assert status == 503 and body["status"] == "unhealthy"
        assert body["groups"]["acme"]["problem"] == "not_applying" and body["groups"]["globex"]["problem"] is None
        set_status(api, "acme", commitIndex=50, appliedIndex=50)
        status, body = await health(api)
        assert status == 200 and body["status"] == "healthy" and body["groups"]["acme"]["problem"] is None


async def test_a_group_catching_up_is_not_flagged():
    async with ApiHarness() as api:
        clock = fake_clock(api)
        for applied in range(1, 40, 3):
            set_status(api, "acme", commitIndex=100, appliedIndex=applied)
            status, body = await health(api)
            assert status == 200 and body["groups"]["acme"]["problem"] is None
            clock.now += APPLY_STALL_S


async def test_a_state_that_failed_to_load_is_unhealthy_at_once():
    async with ApiHarness() as api:
        set_status(api, "globex", loadError="snapshot checksum mismatch")
        status, body = await health(api)
        assert status == 503 and body["status"] == "unhealthy"
        assert body["groups"]["globex"]["problem"] == "state_not_loaded"


async def test_a_full_disk_is_unhealthy_with_its_reason():
    async with ApiHarness() as api:
        set_status(api, "acme", diskFull=True)
        status, body = await health(api)
        assert status == 503 and body["status"] == "unhealthy" and body["groups"]["acme"]["problem"] == "disk_full"


TERM_NOT_STORED = {"failed": 3, "failing": True, "failingSinceMs": 1_700_000_000_000,
                   "lastError": "term 7, vote None: [Errno 13] Permission denied"}


async def test_a_term_that_cannot_be_stored_is_unhealthy_on_that_group_alone_until_a_store_succeeds():
    async with ApiHarness() as api:
        set_status(api, "acme", termStore=TERM_NOT_STORED)
        status, body = await health(api)
        assert status == 503 and body["status"] == "unhealthy"
        assert body["groups"]["acme"]["problem"] == "term_not_stored" and body["groups"]["globex"]["problem"] is None
        set_status(api, "acme", termStore={**TERM_NOT_STORED, "failing": False, "failingSinceMs": None,
                                           "lastError": None})
        status, body = await health(api)
        assert status == 200 and body["status"] == "healthy" and body["groups"]["acme"]["problem"] is None


async def test_a_data_dir_that_takes_no_writes_at_all_is_named_by_its_journal():
    async with ApiHarness() as api:
        set_status(api, "acme", diskFull=True, termStore=TERM_NOT_STORED)
        status, body = await health(api)
        assert status == 503 and body["groups"]["acme"]["problem"] == "disk_full"
