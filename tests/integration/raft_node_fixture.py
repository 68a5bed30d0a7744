"""Real processes hosting one TenantGroup each, for the Raft layer's integration tests.

Run as a script, it is one node: it builds a TenantGroup (with the test state, or TenantState with
--state tenant) on the main thread, starts the leader tick, and serves a tiny JSON-over-HTTP control
protocol on 127.0.0.1:

    POST /propose  {command}           -> {"result": ...} | 503 {"reason", "retryAfter"}
    POST /read     {"what": name}      -> {"value": ...} after the read barrier
    GET  /local?what=name              -> {"value": ...} without a barrier
    GET  /status                       -> group status plus counters
    POST /compact                      -> forces a log compaction

Imported, RaftNodeProcess and RaftTestCluster start, kill -9, stop and restart such nodes.
The full node (HTTP API) belongs to the API layer; this exists only to test queen_raft.raft.
"""

from __future__ import annotations

import argparse
import base64
import collections
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# How long a node gets to bind and answer /status after spawn (the interpreter and pysyncobj
# import take ~0.3 s on this 2-core box; leave room for a loaded CI machine).
NODE_START_TIMEOUT_S = 15.0
# Upper bound for an election to settle in a test: 0.2-0.6 s timeouts elect in ~0.3 s median,
# up to ~2 s measured after a kill -9; allow for a loaded machine.
LEADER_WAIT_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.02
# A barrier read answered 503 (no leader yet, leader changed) is retried this often, sleeping the
# Retry-After but at most MAX_RETRY_SLEEP_S: ~10 s in all, above any election we expect.
READ_ATTEMPTS = 50
MAX_RETRY_SLEEP_S = 0.2
# The group's Raft password: RaftTestCluster gives its nodes one, as every node config has.
PASSWORD_ENV = "QUEEN_TEST_RAFT_PASSWORD"
# Raft timings a test may set (--append-entries-period-s ...); RaftSettings' defaults otherwise.
TIMING_ARGS = ("append_entries_period_s", "election_min_s", "election_max_s", "leader_fallback_timeout_s")
# The fire lags a node keeps for /status: enough for a test's window, bounded for a long run.
TICK_LAGS_KEPT = 10_000


# ------------------------------------------------------------------------------------------------
# The node (subprocess side)
# ------------------------------------------------------------------------------------------------

def _state_views(state) -> dict:
    """What /read and /local can return, by name."""
    if hasattr(state, "values"):  # the test state
        return {
            "values": lambda: state.values,
            "value_sizes": lambda: {k: len(v) for k, v in state.values.items()},
            "applied": lambda: state.applied,
            "clock": lambda: state.clock,
            "fired": lambda: state.fired,
            "timers": lambda: state.timers,
            "ops": lambda: state.ops,
        }
    return {  # TenantState
        "counters": lambda: state.counters(),
        "clock": lambda: state.clock,
        "next_due_at": lambda: state.next_due_at(),
    }


def _view(state, what: str):
    if what.startswith("fetch:"):  # TenantState: every message of a queue's default partition
        return state.fetch(what.split(":", 1)[1], "Default", 0, 100_000)
    return _state_views(state)[what]()


def _from_json(value):
    """JSON carries bytes as {"$bytes": base64}; commands hold real bytes (docs/commands.md)."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"not JSON: {type(value).__name__}")


def _json_response(body, status=200):
    from aiohttp import web

    return web.Response(text=json.dumps(body, default=_json_default), status=status, content_type="application/json")


async def _serve(args) -> None:
    from aiohttp import web

    from queen_raft.raft import GroupUnavailable, RaftSettings, TenantGroup

    if args.state == "tenant":
        from queen_raft.state import TenantState

        factory, restore = TenantState, TenantState.restore
    else:
        sys.path.insert(0, HERE)
        from raft_test_state import TimerLogState

        factory, restore = TimerLogState, TimerLogState.restore
        TimerLogState.snapshot_delay_s = args.snapshot_delay_s

    settings = RaftSettings(
        fsync=args.fsync,
        tick_ms=args.tick_ms,
        log_compaction_min_entries=args.compaction_entries,
        commit_timeout_ms=args.commit_timeout_ms,
        **{name: getattr(args, name) for name in TIMING_ARGS if getattr(args, name) is not None},
        # From the environment, not argv: argv is visible to every user of the machine.
        password=os.environ.get(PASSWORD_ENV) or None,
    )
    dial_map = json.loads(args.dial_map) if args.dial_map else None
    # Built here, on the main thread (asyncio.run runs this coroutine on it).
    group = TenantGroup(
        args.tenant, args.self_addr, args.peers.split(","), args.data_dir, settings, factory, restore,
        dial_map=dial_map,
    )
    # As the node does (node.build_node): serve only once the Raft port is bound.
    group.wait_bound()
    tick_lags: collections.deque[int] = collections.deque(maxlen=TICK_LAGS_KEPT)
    group.on_tick_result = lambda result, lags: tick_lags.extend(lags)
    group.on_leadership_change = lambda tenant, role, leader, term: print(
        f"leadership tenant={tenant} role={role} leader={leader} term={term}", flush=True
    )
    loop = asyncio.get_running_loop()
    group.start_tick_loop(loop)

    async def propose(request):
        command = _from_json(await request.json())
        try:
            result = await group.propose(command)
        except GroupUnavailable as exc:
            return web.json_response({"reason": exc.reason, "retryAfter": exc.retry_after_s}, status=503)
        return _json_response({"result": result})

    async def read(request):
        what = (await request.json())["what"]
        try:
            value = await group.read(lambda state: _view(state, what))
        except GroupUnavailable as exc:
            return web.json_response({"reason": exc.reason, "retryAfter": exc.retry_after_s}, status=503)
        return _json_response({"value": value})

    async def local(request):
        what = request.query["what"]
        return _json_response({"value": group.peek_local(lambda state: _view(state, what))})

    async def status(request):
        body = group.status()
        body.update(
            ticksProposed=group.ticks_proposed,
            barriersProposed=group.barriers_proposed,
            journalFlushes=group.journal_flushes,
            tickLags=list(tick_lags),
            pid=os.getpid(),
            # The index of the last snapshot this node wrote, and whether a writer runs.
            snapshotIndex=group._syncobj._SyncObj__lastSerializedEntry,
            snapshotWriting=group._syncobj._SyncObj__serializer.writing,
        )
        return web.json_response(body)

    async def compact(request):
        group.force_log_compaction()
        return web.json_response({})

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.add_routes([
        web.post("/propose", propose),
        web.post("/read", read),
        web.get("/local", local),
        web.get("/status", status),
        web.post("/compact", compact),
    ])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.http_port)
    await site.start()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    print(f"ready http=127.0.0.1:{args.http_port} raft={args.self_addr}", flush=True)
    await stopping.wait()
    await group.stop()
    await runner.cleanup()
    group.destroy()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenant", default="t1")
    parser.add_argument("--self-addr", required=True)
    parser.add_argument("--peers", required=True, help="comma-separated Raft addresses of all nodes")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--fsync", default="group", choices=["group", "off"])
    parser.add_argument("--tick-ms", type=int, default=50)
    parser.add_argument("--compaction-entries", type=int, default=2000)
    parser.add_argument("--commit-timeout-ms", type=int, default=5000)
    parser.add_argument("--state", default="test", choices=["test", "tenant"])
    for name in TIMING_ARGS:
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=None,
                            help="RaftSettings." + name + " (default: RaftSettings')")
    parser.add_argument("--dial-map", default="", help="JSON {peer address: dial address}")
    parser.add_argument("--snapshot-delay-s", type=float, default=0.0,
                        help="the test state's snapshot() sleeps this long (in the forked writer)")
    args = parser.parse_args(argv)
    from queen_raft.raft.snapshot_file import DataDirRefused

    try:
        asyncio.run(_serve(args))
    except DataDirRefused as exc:  # as the node does: one message, exit 65
        print(exc, flush=True)
        raise SystemExit(exc.exit_code) from None


# ------------------------------------------------------------------------------------------------
# The controller (test side)
# ------------------------------------------------------------------------------------------------

class NodeUnavailable(Exception):
    def __init__(self, reason: str, retry_after: float) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _http(method: str, url: str, body: dict | None = None, timeout: float = HTTP_TIMEOUT_S) -> dict:
    data = None if body is None else json.dumps(body, default=_json_default).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return _from_json(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            payload = json.loads(exc.read())
            raise NodeUnavailable(payload["reason"], payload["retryAfter"]) from None
        raise


class RaftNodeProcess:
    def __init__(self, index: int, raft_port: int, http_port: int, raft_addrs: list[str], data_dir: str,
                 log_dir: str, extra_args: list[str], password: str | None = None) -> None:
        self.index = index
        self.password = password
        self.raft_addr = f"127.0.0.1:{raft_port}"
        self.http_port = http_port
        self.raft_addrs = raft_addrs
        self.data_dir = data_dir
        self.log_path = os.path.join(log_dir, f"node{index}.log")
        self.extra_args = extra_args
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop(PASSWORD_ENV, None)
        if self.password is not None:
            env[PASSWORD_ENV] = self.password
        log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--self-addr", self.raft_addr,
             "--peers", ",".join(self.raft_addrs), "--data-dir", self.data_dir,
             "--http-port", str(self.http_port), *self.extra_args],
            stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )
        log_file.close()
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"node {self.index} exited with {self.process.returncode}: {self.log_tail()}")
            try:
                self.status()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {self.index} did not answer: {self.log_tail()}")
                time.sleep(POLL_INTERVAL_S)

    def kill(self) -> None:
        """kill -9: no flush, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-chars:]
        except OSError:
            return ""

    def status(self) -> dict:
        return _http("GET", self.url + "/status", timeout=2)

    def propose(self, command: dict, timeout: float = HTTP_TIMEOUT_S) -> dict:
        return _http("POST", self.url + "/propose", command, timeout=timeout)["result"]

    def read(self, what: str) -> object:
        """A barrier read, retried on 503 as the client contract says (e.g. an election right
        after a restart answers leader_changed); a retry is still linearizable."""
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return _http("POST", self.url + "/read", {"what": what})["value"]
            except NodeUnavailable as exc:
                time.sleep(min(exc.retry_after, MAX_RETRY_SLEEP_S))
        return _http("POST", self.url + "/read", {"what": what})["value"]

    def local(self, what: str) -> object:
        return _http("GET", self.url + "/local?what=" + what)["value"]

    def compact(self) -> None:
        _http("POST", self.url + "/compact", {})


class RaftTestCluster:
    """Three (or n) node processes of one group on 127.0.0.1, data under tmp_dir."""

    def __init__(self, tmp_dir: str, raft_base_port: int, http_base_port: int, size: int = 3,
                 extra_args: list[str] | None = None, password: str | None = None) -> None:
        raft_addrs = [f"127.0.0.1:{raft_base_port + i}" for i in range(size)]
        self.password = password if password is not None else secrets.token_urlsafe(32)
        self.nodes = [
            RaftNodeProcess(i, raft_base_port + i, http_base_port + i, raft_addrs,
                            os.path.join(tmp_dir, f"node{i}"), tmp_dir, extra_args or [], self.password)
            for i in range(size)
        ]

    def start(self) -> "RaftTestCluster":
        for node in self.nodes:
            node.start()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def kill_all(self) -> None:
        for node in self.nodes:
            node.kill()

    def wait_for_leader(self, among: list[RaftNodeProcess] | None = None,
                        timeout: float = LEADER_WAIT_TIMEOUT_S) -> RaftNodeProcess:
        """The node every live node agrees is leader (and which says so itself)."""
        nodes = [n for n in (among or self.nodes) if n.alive]
        deadline = time.monotonic() + timeout
        while True:
            statuses = {}
            for node in nodes:
                try:
                    statuses[node.raft_addr] = node.status()
                except (urllib.error.URLError, OSError):
                    pass
            leaders = {s["leader"] for s in statuses.values()}
            if len(statuses) == len(nodes) and len(leaders) == 1 and None not in leaders:
                (leader_addr,) = leaders
                leader = next((n for n in nodes if n.raft_addr == leader_addr), None)
                if leader is not None and statuses[leader_addr]["role"] == "leader":
                    return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed leader within {timeout} s: {statuses}")
            time.sleep(POLL_INTERVAL_S)

    def followers(self, leader: RaftNodeProcess) -> list[RaftNodeProcess]:
        return [n for n in self.nodes if n is not leader]

    def logs(self) -> str:
        return "\n".join(f"--- node{n.index} ---\n{n.log_tail()}" for n in self.nodes)


if __name__ == "__main__":
    main()
