"""Real node processes (`python -m queen_raft node`) on 127.0.0.1, from a temporary cluster config.

`NodeCluster` writes the TOML (free ports, a temp data dir), starts each node, waits until every
node reports a leader for every group, talks HTTP to any node, kills or restarts one, and stops
them all by PID. `node_cluster` is a module-scoped pytest fixture around it: import it into a test
module (`from cluster_fixture import node_cluster`) to use it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

TENANTS = ("acme", "globex")
LEVEL_SUFFIX = {"admin": "admin", "read-write": "rw", "read-only": "ro", "write-only": "wo"}


def token(tenant: str, level: str) -> str:
    return f"{tenant}-{LEVEL_SUFFIX[level]}-test"


# A node imports pysyncobj and binds its ports in ~0.5 s; an election settles in ~0.3 s (2 s worst
# measured after a kill -9). The rest is room for a loaded 2-core machine.
CLUSTER_READY_TIMEOUT_S = 20.0
NODE_STOP_TIMEOUT_S = 10.0
HTTP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.05
# Raft ports are raft_port + tenant index, so each node needs a free run of len(TENANTS) ports.
# Below Linux's ephemeral range (32768-60999): a port picked there can be taken, between the
# probe and the node's bind, by any outgoing connection or any bind(0) of a concurrent test.
PORT_RANGE = (20_000, 32_000)
PORT_PICK_ATTEMPTS = 200
# A port can still be taken between the probe and the bind by another test on this machine: the
# cluster is started again on fresh ports this many times before the fixture gives up.
START_ATTEMPTS = 3


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port_runs(count: int, run_length: int) -> list[int]:
    """`count` bases, each starting `run_length` free consecutive ports, none overlapping."""
    taken: set[int] = set()
    bases: list[int] = []
    for _ in range(PORT_PICK_ATTEMPTS):
        if len(bases) == count:
            return bases
        base = random.randrange(*PORT_RANGE)
        run = set(range(base, base + run_length))
        if run & taken or not all(_port_free(p) for p in run):
            continue
        taken |= run
        bases.append(base)
    raise RuntimeError(f"no {count} free runs of {run_length} ports in {PORT_RANGE}")


def http_call(url: str, method: str = "GET", token_text: str | None = None, body: Any = None,
              raw: bytes | None = None, timeout: float = HTTP_TIMEOUT_S) -> tuple[int, dict, Any]:
    """(status, headers, parsed JSON or text or None) of one request; (0, {}, None) if nobody answers."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    if token_text is not None:
        request.add_header("Authorization", f"Bearer {token_text}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, payload = response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        status, headers, payload = exc.code, dict(exc.headers), exc.read()
    except (ConnectionError, urllib.error.URLError, http.client.HTTPException, socket.timeout):
        return 0, {}, None
    if not payload:
        return status, headers, None
    try:
        return status, headers, json.loads(payload)
    except ValueError:
        return status, headers, payload.decode("utf-8", "replace")


class NodeCluster:
    def __init__(self, workdir: Path, node_count: int = 3, settings: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None, tenants: tuple[str, ...] = TENANTS):
        self.workdir = Path(workdir)
        self.tenants = tenants
        self.node_ids = [f"n{i + 1}" for i in range(node_count)]
        # Every config has a Raft password (queen_raft/peer_password.py); a test may set its own.
        self.settings = {"raft_password": secrets.token_urlsafe(32), **(settings or {})}
        self.env = dict(env or {})
        self.config_path = self.workdir / "cluster.toml"
        self.processes: dict[str, subprocess.Popen] = {}
        self.http_ports: dict[str, int] = {}
        self.raft_ports: dict[str, int] = {}
        self.data_dir = self.workdir / "data"

    @property
    def raft_password(self) -> str | None:
        return self.settings.get("raft_password")

    # -- config ---------------------------------------------------------------------------------

    def write_config(self) -> None:
        bases = pick_port_runs(2 * len(self.node_ids), len(self.tenants))
        for i, node_id in enumerate(self.node_ids):
            self.http_ports[node_id] = bases[2 * i]
            self.raft_ports[node_id] = bases[2 * i + 1]
        lines = ["[cluster]", 'name = "test"', f'data_dir = "{self.data_dir}"', ""]
        for node_id in self.node_ids:
            lines += ["[[nodes]]", f'id = "{node_id}"', 'host = "127.0.0.1"',
                      f"http_port = {self.http_ports[node_id]}", f"raft_port = {self.raft_ports[node_id]}", ""]
        for tenant in self.tenants:
            lines += ["[[tenants]]", f'name = "{tenant}"']
            for level in LEVEL_SUFFIX:
                lines += ["[[tenants.tokens]]", f'token = "{token(tenant, level)}"', f'level = "{level}"']
            lines.append("")
        settings = {key: value for key, value in self.settings.items() if value is not None}
        if settings:
            lines.append("[settings]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
        self.config_path.write_text("\n".join(lines) + "\n")

    # -- processes ------------------------------------------------------------------------------

    def url(self, node_id: str) -> str:
        return f"http://127.0.0.1:{self.http_ports[node_id]}"

    def log_path(self, node_id: str) -> Path:
        return self.workdir / f"{node_id}.log"

    def start_node(self, node_id: str, without_env: tuple[str, ...] = ()) -> None:
        """`without_env` names variables this start leaves out (a node started without its key)."""
        env = {**os.environ, **self.env}
        env.pop("QUEEN_TEST_CLOCK_OFFSET_MS", None)
        for name in without_env:
            env.pop(name, None)
        with open(self.log_path(node_id), "ab") as log:
            self.processes[node_id] = subprocess.Popen(
                [sys.executable, "-m", "queen_raft", "node", "--config", str(self.config_path), "--id", node_id],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
            )

    def start(self) -> "NodeCluster":
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            self.data_dir = self.workdir / f"data-{attempt}"  # a failed attempt's journals stay out of the way
            self.write_config()
            for node_id in self.node_ids:
                self.start_node(node_id)
            try:
                self.wait_ready()
                return self
            except RuntimeError:
                self.stop()
                if attempt == START_ATTEMPTS:
                    raise
        return self

    def health(self, node_id: str) -> tuple[int, Any]:
        status, _, body = http_call(f"{self.url(node_id)}/health", timeout=2.0)
        return status, body

    def wait_ready(self, node_ids: list[str] | None = None, timeout_s: float = CLUSTER_READY_TIMEOUT_S) -> None:
        """Until every running node answers 200 and all agree on each group's leader."""
        node_ids = node_ids or [n for n in self.node_ids if self.running(n)]
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            for node_id in node_ids:
                if not self.running(node_id):
                    raise RuntimeError(f"node {node_id} exited:\n{self.log_tail(node_id)}")
            answers = {n: self.health(n) for n in node_ids}
            last = answers
            # The node id in the answer proves it is our node on that port, not another test's server.
            if all(status == 200 and body.get("node") == n for n, (status, body) in answers.items()):
                leaders = {(t, g["leader"]) for _, body in answers.values() for t, g in body["groups"].items()}
                if len(leaders) == len(self.tenants):
                    return
            time.sleep(POLL_INTERVAL_S)
        raise RuntimeError(f"cluster not ready in {timeout_s} s: {last}\n" + "\n".join(self.log_tail(n) for n in node_ids))

    def running(self, node_id: str) -> bool:
        proc = self.processes.get(node_id)
        return proc is not None and proc.poll() is None

    def log_tail(self, node_id: str, lines: int = 30) -> str:
        try:
            text = self.log_path(node_id).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"[{node_id}: no log]"
        return f"--- {node_id} ---\n" + "\n".join(text[-lines:])

    def stop_node(self, node_id: str, sig: int = signal.SIGTERM) -> int:
        """Sends sig to the node's PID and waits; its exit code."""
        proc = self.processes[node_id]
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=NODE_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"node {node_id} ignored signal {sig} for {NODE_STOP_TIMEOUT_S} s")
        return proc.returncode

    def stop(self) -> dict[str, int]:
        codes = {}
        for node_id in list(self.processes):
            try:
                codes[node_id] = self.stop_node(node_id)
            except RuntimeError:
                codes[node_id] = -signal.SIGKILL
        return codes

    # -- talking to it -------------------------------------------------------------------------

    def call(self, node_id: str, method: str, path: str, token_text: str | None = None, body: Any = None,
             raw: bytes | None = None) -> tuple[int, dict, Any]:
        return http_call(f"{self.url(node_id)}{path}", method, token_text, body, raw)

    def role_of(self, tenant: str, role: str) -> str:
        """A running node that holds `role` ("leader" or "follower") in the tenant's group."""
        for node_id in self.node_ids:
            if self.running(node_id):
                status, body = self.health(node_id)
                if status == 200 and body["groups"][tenant]["role"] == role:
                    return node_id
        raise LookupError(f"no {role} for {tenant}")


@contextlib.contextmanager
def running_cluster(directory: Path, **options: Any):
    """A started NodeCluster, stopped afterwards; every node must stop cleanly on SIGTERM."""
    cluster = NodeCluster(directory, **options).start()
    try:
        yield cluster
    finally:
        codes = cluster.stop()
        unclean = {n: c for n, c in codes.items() if c != 0}
        assert not unclean, f"nodes did not stop cleanly on SIGTERM: {unclean}\n" + "\n".join(
            cluster.log_tail(n) for n in unclean)


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        yield cluster


@pytest.fixture
def own_node_cluster(tmp_path):
    """A cluster of the test's own, for a test that kills or restarts nodes (every node must be
    running again, and stop cleanly, when the test ends)."""
    with running_cluster(tmp_path) as cluster:
        yield cluster


def fetch_records(cluster: NodeCluster, node_id: str, queue: str, partition: str = "Default",
                  tenant: str = "acme", limit: int = 1000) -> list[dict]:
    """The records of one partition from offset 0, read through node_id with a read-only token."""
    status, _, body = cluster.call(node_id, "POST", "/api/v1/fetch", token(tenant, "read-only"), {
        "entries": [{"queue": queue, "partition": partition, "offset": 0, "limit": limit}]})
    assert status == 200, body
    return body["entries"][0]["records"]
