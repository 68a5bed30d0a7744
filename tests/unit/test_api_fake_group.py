"""An in-process stand-in for TenantGroup, for the API's fast tests, and the checks that it behaves
like the real one where the API depends on it (msgpack round trip, barrier, unavailability).

FakeGroup applies each command to a real TenantState directly: the routes are tested against the
real state machine, only Raft is left out.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import msgpack
import jsonschema
from aiohttp import test_utils, web

from queen_raft.api.app import create_app
from queen_raft.raft.command_forms import FORMS_LEVEL
from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.encryption import PayloadCipher
from queen_raft.api.metrics import ApiMetrics
from queen_raft.api.openapi import response_schema
from queen_raft.api.rate_limit import TenantRateLimiter
from queen_raft.api.serving import ServingNode
from queen_raft.config import parse_config
from queen_raft.raft import GroupUnavailable
from queen_raft.state import TenantState

START_MS = 1_700_000_000_000
TOKENS = {
    "acme": {"admin": "acme-admin", "read-write": "acme-rw", "read-only": "acme-ro", "write-only": "acme-wo"},
    "globex": {"admin": "globex-admin", "read-write": "globex-rw", "read-only": "globex-ro", "write-only": "globex-wo"},
}


class FakeGroup:
    def __init__(self, tenant: str, signal: ApplySignal):
        self.tenant = tenant
        self.state = TenantState()
        self.signal = signal
        self.now_ms = START_MS
        self.proposed: list[dict] = []
        self.unavailable: GroupUnavailable | None = None
        self.tick_results: list[dict] = []
        self.peers_level = FORMS_LEVEL  # what the other members apply (raft/command_forms.py)

    def _apply(self, command: dict) -> dict:
        command = dict(command)
        command.setdefault("now", self.now_ms)
        # The real group ships commands as msgpack: bytes stay bytes, tuples become lists.
        command = msgpack.unpackb(msgpack.packb(command, use_bin_type=True), raw=False)
        result = self.state.apply(command)
        self.signal.notify_threadsafe()
        return result

    async def propose(self, command: dict) -> dict:
        if self.unavailable is not None:
            raise self.unavailable
        self.proposed.append(command)
        # A real commit takes a round trip: other requests run meanwhile, against the old state.
        await asyncio.sleep(0)
        return self._apply(command)

    async def read(self, fn):
        if self.unavailable is not None:
            raise self.unavailable
        self._apply({"op": "barrier"})
        return fn(self.state)

    def peek_local(self, fn):
        return fn(self.state)

    def peers_apply(self, level: int) -> bool:
        return self.peers_level >= level

    def status(self) -> dict:
        return {"role": "leader", "leader": "127.0.0.1:7400", "term": 1, "commitIndex": len(self.proposed), "appliedIndex": len(self.proposed)}

    def advance(self, ms: int) -> dict:
        """Moves the group clock and fires what is due, like the leader tick would."""
        self.now_ms += ms
        result = self._apply({"op": "tick"})
        self.tick_results.append(result)
        return result

    def writes(self) -> list[dict]:
        return [c for c in self.proposed if c["op"] != "barrier"]


def cluster_config(env: dict[str, str] | None = None):
    raw = {
        "cluster": {"name": "unit", "data_dir": "/nonexistent"},
        "nodes": [{"id": "n1", "host": "127.0.0.1", "http_port": 6632, "raft_port": 7400}],
        "tenants": [
            {"name": tenant, "tokens": [{"token": token, "level": level} for level, token in levels.items()]}
            for tenant, levels in TOKENS.items()
        ],
    }
    return parse_config(raw, env=env or {})


def make_serving(env: dict[str, str] | None = None) -> tuple[ServingNode, dict[str, FakeGroup]]:
    config = cluster_config(env)
    signals = {t.name: ApplySignal() for t in config.tenants}
    groups = {t.name: FakeGroup(t.name, signals[t.name]) for t in config.tenants}
    serving = ServingNode(
        node_id="n1", config=config, groups=groups, apply_signals=signals,
        metrics=ApiMetrics(groups_source=lambda: groups),
        timer_rate=TenantRateLimiter(config.settings.timers_rate, config.settings.timers_rate_burst),
        cipher=PayloadCipher(config.settings.encryption_key) if config.settings.encryption_key else None,
    )
    return serving, groups


def conformance_problem(route: str, method: str, status: int, content_type: str, body: bytes) -> str | None:
    """What is wrong with one real answer against the OpenAPI document, or None."""
    try:
        schema = response_schema(route, method, status)
    except KeyError as exc:
        return str(exc)
    if schema is None:
        return None
    if not content_type.startswith("application/json"):
        return f"{method} {route} {status}: content type {content_type}, documented JSON"
    try:
        jsonschema.validate(json.loads(body), schema, cls=jsonschema.Draft202012Validator)
    except jsonschema.ValidationError as exc:
        return f"{method} {route} {status}: {exc.message} at {list(exc.absolute_path)}"
    return None


def recording_middleware(exchanges: list):
    """Outermost, so it sees the answer the client gets (after the JSON error middleware)."""

    @web.middleware
    async def record(request: web.Request, handler):
        response = await handler(request)
        resource = getattr(request.match_info.route, "resource", None)
        if resource is not None and isinstance(response, web.Response):
            exchanges.append((resource.canonical, request.method, response.status, response.content_type,
                              response.body or b""))
        return response

    return record


class ApiHarness:
    """An aiohttp test client on a real app over FakeGroups. Every answer to a documented route is
    checked against the OpenAPI document when the harness closes, so each API unit test is also a
    conformance test of what it touched."""

    def __init__(self, env: dict[str, str] | None = None):
        self.serving, self.groups = make_serving(env)
        app = create_app(self.serving)
        self.exchanges: list[tuple] = []
        app.middlewares.insert(0, recording_middleware(self.exchanges))
        self.client = test_utils.TestClient(test_utils.TestServer(app))

    async def __aenter__(self) -> "ApiHarness":
        await self.client.start_server()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()
        if exc[0] is None:
            problems = [p for p in (conformance_problem(*exchange) for exchange in self.exchanges) if p]
            assert not problems, "answers not as documented:\n" + "\n".join(problems)

    async def call(self, method: str, path: str, token: str | None = "acme-rw", json: Any = None,
                   data: bytes | None = None) -> tuple[int, dict, Any]:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        response = await self.client.request(method, path, json=json, data=data, headers=headers)
        body = await response.read()
        parsed = None
        if body:
            try:
                parsed = await response.json(content_type=None)
            except ValueError:
                parsed = body.decode()
        return response.status, dict(response.headers), parsed


# --- checks that the fake is faithful where the API relies on it ----------------------------------

def test_fake_group_round_trips_commands_through_msgpack():
    group = FakeGroup("acme", ApplySignal())
    group._apply({"op": "push", "producerSub": "s", "items": [{
        "queue": "q", "partition": "Default", "payload": b"\xff", "transactionId": "t",
        "messageId": "m", "traceId": None, "encrypted": False}]})
    records = group.state.fetch("q", "Default", 0, 10)
    assert [r["payload"] for r in records] == [b"\xff"]


async def test_fake_group_read_proposes_a_barrier_and_unavailable_raises():
    group = FakeGroup("acme", ApplySignal())
    assert await group.read(lambda s: s.clock) == START_MS
    group.unavailable = GroupUnavailable("no_leader")
    try:
        await group.read(lambda s: s.clock)
    except GroupUnavailable as exc:
        assert exc.reason == "no_leader" and exc.retry_after_s > 0
    else:
        raise AssertionError("read did not raise")


def test_tokens_of_the_unit_config_resolve():
    config = cluster_config()
    assert config.find_token("acme-wo").level == "write-only"
    assert config.find_token("globex-ro").tenant == "globex"
    assert hashlib.sha256(b"acme-rw").hexdigest() in config.tokens_by_sha256
