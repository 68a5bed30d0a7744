"""A property-based fuzz run of the API from its OpenAPI document (schemathesis on Hypothesis).

The app runs on a real port (schemathesis speaks HTTP through requests) over FakeGroups, so every
request reaches the real routes and the real state machine, and the state can be compared before
and after each call. For every operation, schema-valid and schema-violating requests, under every
token level, and the properties:

- no 5xx but the documented 503s, no crash; status, content type, headers and body as documented;
- a refused request (any 4xx/5xx, or a transaction answered success: false) changes no tenant's
  state (its snapshot bytes, the group clock aside).

Bounded (FUZZ_EXAMPLES per operation and mode) so that it runs within `make test` in well under a
minute on two shared cores.
"""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest
import requests
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.openapi import from_dict
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from queen_raft.api.app import create_app
from queen_raft.api.openapi import document
from test_api_fake_group import TOKENS, make_serving

# Examples per operation and generation mode: ~27 operations x 2 modes x this many requests.
FUZZ_EXAMPLES = 20
# Each request moves the group clock this much, so leases, TTLs and due timers come and go.
CLOCK_STEP_MS = 700
# The only 5xx the document names: an operator's pause, a keyless node, no leader / no commit.
DOCUMENTED_503_CODES = frozenset({"timers_disabled", "timers_unavailable", "unavailable", "encryption_unavailable"})
REQUEST_TIMEOUT_S = 10.0
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
# Every level of one tenant, another tenant's token, and none: each refusal path gets its turn.
AUTH_HEADERS = [{"Authorization": f"Bearer {TOKENS['acme'][level]}"}
                for level in ("admin", "read-write", "read-only", "write-only")] + [
    {"Authorization": f"Bearer {TOKENS['globex']['read-write']}"}, {}]

SCHEMA = from_dict(document())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


def has_inputs(operation) -> bool:
    """Schema-violating requests exist only for an operation that takes something (GET /health
    takes nothing: there is no invalid way to call it)."""
    return any(len(part) for part in (operation.path_parameters, operation.query, operation.body, operation.headers))


RUNS = [(operation, mode) for operation in OPERATIONS for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.POSITIVE or has_inputs(operation)]


class ServedApp:
    """The app over FakeGroups on 127.0.0.1, on its own loop in a thread. Requests are made one
    at a time from the test, so the state is read between them while the server is idle."""

    def __init__(self):
        self.serving, self.groups = make_serving()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.base_url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        for signal in self.serving.apply_signals.values():
            signal.bind(self.loop)
        runner = web.AppRunner(create_app(self.serving), access_log=None)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.runner = runner
        self.ready.set()
        self.loop.run_forever()

    def start(self) -> "ServedApp":
        self.thread.start()
        assert self.ready.wait(10), "the app did not start"
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def digest(self) -> dict[str, bytes]:
        """Each tenant's state as snapshot bytes, the clock left out (a refusal may move it)."""
        out = {}
        for tenant, group in self.groups.items():
            state = group.state
            clock, state.clock = state.clock, 0
            try:
                out[tenant] = state.snapshot()
            finally:
                state.clock = clock
        return out

    def tick(self) -> None:
        for group in self.groups.values():
            group.now_ms += CLOCK_STEP_MS


@pytest.fixture(scope="module")
def served():
    app = ServedApp().start()
    try:
        yield app
    finally:
        app.stop()


def refused(response: requests.Response) -> bool:
    if response.status_code >= 400:
        return True
    if response.status_code == 200 and response.headers.get("Content-Type", "").startswith("application/json"):
        body = response.json()
        return isinstance(body, dict) and body.get("success") is False
    return False


@pytest.mark.parametrize(("operation", "mode"), RUNS,
                         ids=[f"{op.label} {'valid' if mode is GenerationMode.POSITIVE else 'invalid'}" for op, mode in RUNS])
def test_fuzz_operation(served, operation, mode):
    auth = itertools.cycle(AUTH_HEADERS)
    session = requests.Session()

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        if case.query and "wait" in case.query:
            case.query["wait"] = False  # a long poll would hold the run for its timeout, not test more
        served.tick()
        before = served.digest()
        headers = next(auth)
        response = case.call(base_url=served.base_url, session=session, headers=headers, timeout=REQUEST_TIMEOUT_S)
        if response.status_code >= 500:
            assert response.status_code == 503 and response.json().get("error") in DOCUMENTED_503_CODES, (
                f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}")
        case.validate_response(response, checks=CHECKS, headers=headers)
        if refused(response):
            assert served.digest() == before, (
                f"refused {case.method} {case.formatted_path} ({response.status_code} {response.text[:200]}) changed state")

    run()
