"""Every tenant has a pending-timer quota by default, sized to memory: TIMERS_MEMORY_BUDGET_BYTES
over TIMER_MEMORY_BYTES (the measured heap of one pending timer, rounded up). A setting changes it
for every tenant, a `[[tenants]]` key for one; past it a schedule is 403 timers_quota_exceeded."""

from __future__ import annotations

import base64

import pytest

from queen_raft.config import (
    DEFAULT_TIMERS_MAX_PENDING, TIMER_MEMORY_BYTES, TIMERS_MEMORY_BUDGET_BYTES, ConfigError, parse_config)
from test_api_fake_group import ApiHarness, cluster_config

PAYLOAD = base64.b64encode(b"{}").decode()


def config(acme: dict | None = None, env: dict | None = None, settings: dict | None = None):
    raw = {
        "cluster": {"name": "t", "data_dir": "/nonexistent"},
        "nodes": [{"id": "n1", "host": "127.0.0.1", "http_port": 6632, "raft_port": 7400}],
        "tenants": [{"name": "acme", "tokens": [{"token": "acme-rw", "level": "read-write"}], **(acme or {})},
                    {"name": "globex", "tokens": [{"token": "globex-rw", "level": "read-write"}]}],
    }
    if settings:
        raw["settings"] = settings
    return parse_config(raw, env=env or {})


def test_the_default_quota_is_the_memory_budget_over_the_bytes_of_a_timer():
    assert DEFAULT_TIMERS_MAX_PENDING == TIMERS_MEMORY_BUDGET_BYTES // TIMER_MEMORY_BYTES
    assert 1_000_000 < DEFAULT_TIMERS_MAX_PENDING < 10_000_000  # room for the million-timer benches, not for OOM
    cfg = config()
    assert cfg.timers_max_pending("acme") == cfg.timers_max_pending("globex") == DEFAULT_TIMERS_MAX_PENDING


def test_a_tenant_key_overrides_the_setting_for_that_tenant_only():
    cfg = config(acme={"timers_max_pending": 5}, env={"QUEEN_TIMERS_MAX_PENDING": "7"})
    assert (cfg.timers_max_pending("acme"), cfg.timers_max_pending("globex")) == (5, 7)
    cfg = config(acme={"timers_max_pending": "unlimited"}, settings={"timers_max_pending": 9})
    assert (cfg.timers_max_pending("acme"), cfg.timers_max_pending("globex")) == (None, 9)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "lots"])
def test_a_bad_tenant_quota_stops_the_node_naming_the_key(bad):
    with pytest.raises(ConfigError, match="timers_max_pending"):
        config(acme={"timers_max_pending": bad})


async def test_a_schedule_is_proposed_with_the_default_quota_and_refused_past_it():
    async with ApiHarness() as api:
        await api.call("POST", "/api/v1/timers", json=[{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 9,
                                                        "txn": "t", "payload": PAYLOAD}])
        assert api.groups["acme"].writes()[-1]["maxPending"] == DEFAULT_TIMERS_MAX_PENDING
        await api.call("POST", "/api/v1/transaction", json={"timers": [{
            "op": "schedule", "queue": "q", "timerKey": "k2", "delayMs": 9, "txn": "t2", "payload": PAYLOAD}]})
        assert api.groups["acme"].writes()[-1]["maxPending"] == DEFAULT_TIMERS_MAX_PENDING


async def test_a_tenant_quota_from_the_config_is_answered_403_timers_quota_exceeded():
    async with ApiHarness() as api:
        base = cluster_config()
        acme = base.tenant("acme")
        tenants = tuple(t if t.name != "acme" else type(t)(**{**t.__dict__, "timers_max_pending": 1}) for t in base.tenants)
        api.serving.config = type(base)(**{**base.__dict__, "tenants": tenants})
        assert acme.timers_max_pending is None
        op = {"op": "schedule", "queue": "q", "delayMs": 60_000, "txn": "t", "payload": PAYLOAD}
        status, _, _ = await api.call("POST", "/api/v1/timers", json=[{**op, "timerKey": "a"}])
        assert status == 200
        status, _, body = await api.call("POST", "/api/v1/timers", json=[{**op, "timerKey": "b"}])
        assert (status, body["error"]) == (403, "timers_quota_exceeded")
        status, _, body = await api.call("POST", "/api/v1/timers", token="globex-rw", json=[{**op, "timerKey": "b"}])
        assert status == 200  # another tenant keeps the default
