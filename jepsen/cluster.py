"""Real node processes on 127.0.0.1, started from a TOML config written into the run directory.

Everything here works from outside the service: it writes a config, starts `queen-raft node`
processes, signals them by PID (never by name), and reads their `/health`. Each node dials its
peers' Raft ports through the per-link proxies of `network.py`, so the nemesis can cut links.
A node's ports, command and process are in `nodes.py`.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from jepsen.network import LinkNetwork
from jepsen.nodes import HOST, NodeProcess, free_port_block, free_ports, node_command, with_tree_first

# Two tenants, so two Raft groups on the same node processes, as users run them: the timer
# workloads in the first, the message workloads (queue, dedup, txn) in the second. A fault hits
# both groups at once. "The leader" of a fault is the first tenant's leader.
TENANT = "jepsen"
ORDERS_TENANT = "jepsen-orders"
TOKEN_READ_WRITE = "jepsen-rw"
TOKEN_ADMIN = "jepsen-admin"
# tenant -> (read-write token, admin token)
TENANT_TOKENS = {TENANT: (TOKEN_READ_WRITE, TOKEN_ADMIN),
                 ORDERS_TENANT: ("jepsen-orders-rw", "jepsen-orders-admin")}

# A graceful stop (SIGTERM) that takes longer than this is finished with SIGKILL.
STOP_GRACE_S = 5.0
# A started node must answer /health (any status) within this, or the start is reported as failed.
START_ANSWER_TIMEOUT_S = 20.0
# /health is polled this often while waiting for a leader; cheap, and fine-grained next to the
# 0.2-0.6 s election timeout.
HEALTH_POLL_S = 0.1
# One /health request; a paused node never answers, so keep it short.
HEALTH_REQUEST_TIMEOUT_S = 1.0
# Settings every node of a test cluster runs with (docs/spec.md section 6 names; QUEEN_* overrides).
# The test hooks allow a clock offset at start and the runtime clock route.
TEST_ENVIRONMENT = {"QUEEN_TEST_HOOKS": "1"}
# The node's test-hooks route that moves its clock at runtime (queen_raft/api/harness_hooks.py).
CLOCK_ROUTE = "/api/v1/test/clock"
# One clock request; the node answers at once unless it is paused or gone.
CLOCK_REQUEST_TIMEOUT_S = 2.0
# Paths in a run's records are named from here, so a run copied into jepsen/findings/ names no machine's paths.
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ClusterSpec:
    node_ids: list[str] = field(default_factory=lambda: ["n1", "n2", "n3"])
    tenants: list[str] = field(default_factory=lambda: list(TENANT_TOKENS))
    settings: dict[str, object] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    data_dir_name: str = "data"  # "lazy" when the nodes' data dirs are lazy filesystems (power.py)


class Cluster:
    """Starts, kills, pauses and restarts the nodes of one run; owns the link proxies."""

    def __init__(self, run_dir: Path, spec: ClusterSpec | None = None) -> None:
        self.run_dir = run_dir
        self.spec = spec or ClusterSpec()
        self.config_path = run_dir / "cluster.toml"
        self.raft_password = secrets.token_urlsafe(32)
        self.data_dir = run_dir / self.spec.data_dir_name
        self.disks = None  # power.PowerDisks when the run mounts lazy filesystems
        self.log_dir = run_dir / "nodes"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.network = LinkNetwork(HOST)
        http_ports = free_ports(len(self.spec.node_ids))
        taken = set(http_ports)
        groups = len(self.spec.tenants)
        self.nodes: dict[str, NodeProcess] = {}
        for node_id, http_port in zip(self.spec.node_ids, http_ports):
            raft_port = free_port_block(groups, taken=frozenset(taken))
            taken.update(range(raft_port, raft_port + groups))
            self.nodes[node_id] = NodeProcess(
                id=node_id,
                http_port=http_port,
                raft_port=raft_port,
                log_path=self.log_dir / f"{node_id}.log",
            )
        # dial_maps[a][peer base raft address] = the proxy address a dials instead, written to the
        # config as a's [nodes.dial]. A key covers every tenant at its offset: tenant i dials proxy
        # port + i, so each link gets one proxy per tenant on consecutive ports, and a cut of the
        # link (dialer, target) cuts every tenant's group alike.
        self.dial_maps: dict[str, dict[str, str]] = {node_id: {} for node_id in self.nodes}
        for dialer in self.nodes.values():
            for target in self.nodes.values():
                if dialer.id == target.id:
                    continue
                proxy_port = free_port_block(groups, taken=frozenset(taken))
                taken.update(range(proxy_port, proxy_port + groups))
                for offset in range(groups):
                    self.network.add_link(dialer.id, target.id, target.raft_port + offset, proxy_port + offset)
                self.dial_maps[dialer.id][target.raft_address] = f"{HOST}:{proxy_port}"
        self.config_path.write_text(self.render_config(), encoding="utf-8")

    @property
    def node_ids(self) -> list[str]:
        return list(self.nodes)

    def render_config(self) -> str:
        """The cluster TOML (docs/spec.md section 6) plus each node's dial map under `[nodes.dial]`."""
        lines = [
            "# Written by the fault harness for one run; not a dev config.",
            "[cluster]",
            f'name = "jepsen-{self.run_dir.name}"',
            f"data_dir = {json.dumps(str(self.data_dir))}",
            "",
        ]
        for node in self.nodes.values():
            lines += [
                "[[nodes]]",
                f'id = "{node.id}"',
                f'host = "{HOST}"',
                f"http_port = {node.http_port}",
                f"raft_port = {node.raft_port}",
            ]
            lines += ["# peer Raft address -> the per-link proxy this node dials instead", "[nodes.dial]"]
            for peer_address, proxy_address in sorted(self.dial_maps[node.id].items()):
                lines.append(f'"{peer_address}" = "{proxy_address}"')
            lines.append("")
        for tenant in self.spec.tenants:
            read_write, admin = TENANT_TOKENS[tenant]
            lines += ["[[tenants]]", f'name = "{tenant}"',
                      "[[tenants.tokens]]", f'token = "{read_write}"', 'level = "read-write"',
                      "[[tenants.tokens]]", f'token = "{admin}"', 'level = "admin"', ""]
        lines += ["[settings]"]
        # Every config has a Raft password (queen_raft/peer_password.py): one per run.
        settings = {"raft_password": self.raft_password, **self.spec.settings}
        for key, value in sorted(settings.items()):
            lines.append(f"{key} = {json.dumps(value)}")
        return "\n".join(lines) + "\n"

    # -- processes -------------------------------------------------------------------------------

    def start(self, node_id: str, clock_offset_ms: int = 0) -> NodeProcess:
        node = self.nodes[node_id]
        if node.alive():
            raise RuntimeError(f"{node_id} is already running (pid {node.pid})")
        environment = dict(os.environ)
        environment.update(TEST_ENVIRONMENT)
        environment.update(self.spec.environment)
        environment.pop("QUEEN_TEST_CLOCK_OFFSET_MS", None)
        environment = with_tree_first(environment, REPO_ROOT)
        if clock_offset_ms:
            environment["QUEEN_TEST_CLOCK_OFFSET_MS"] = str(clock_offset_ms)
        node.starts += 1
        with node.log_path.open("a", encoding="utf-8") as log:
            log.write(
                f"\n=== harness: start #{node.starts} of {node_id} at {time.time():.3f}"
                f" clock_offset_ms={clock_offset_ms} ===\n"
            )
        log_handle = node.log_path.open("ab")
        try:
            node.process = subprocess.Popen(
                node_command() + ["node", "--config", str(self.config_path), "--id", node_id],
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                cwd=str(self.run_dir),
                # Its own session: a Ctrl-C aimed at the harness must not kill nodes mid-fault;
                # the harness stops them itself, by PID.
                start_new_session=True,
            )
        finally:
            log_handle.close()
        node.paused = False
        node.clock_offset_ms = clock_offset_ms
        node.runtime_clock_offset_ms = None
        return node

    def start_all(self) -> None:
        for node_id in self.nodes:
            if not self.nodes[node_id].alive():
                self.start(node_id)

    def boot(self, timeout_s: float) -> bool:
        """First start of the cluster: True once every node reports a leader; False if one exits."""
        self.start_all()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(not n.alive() for n in self.nodes.values()):
                return False
            if self.wait_healthy(HEALTH_POLL_S * 5):
                return True
        return False

    def _signal(self, node: NodeProcess, signum: int) -> bool:
        if node.process is None or node.process.poll() is not None:
            return False
        os.kill(node.process.pid, signum)
        return True

    def kill(self, node_id: str) -> bool:
        """kill -9: no chance to flush anything; the data directory stays for the restart."""
        node = self.nodes[node_id]
        if not self._signal(node, signal.SIGKILL):
            return False
        node.process.wait()
        node.paused = False
        return True

    def stop(self, node_id: str) -> bool:
        """SIGTERM, then SIGKILL after STOP_GRACE_S. A paused node is resumed first so it can exit."""
        node = self.nodes[node_id]
        if node.process is None or node.process.poll() is not None:
            return False
        if node.paused:
            self.resume(node_id)
        os.kill(node.process.pid, signal.SIGTERM)
        try:
            node.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(node.process.pid, signal.SIGKILL)
            node.process.wait()
        return True

    def stop_all(self, node_ids: list[str]) -> dict[str, str]:
        """SIGTERM to every node at once, then waits for each to exit (SIGKILL after STOP_GRACE_S).
        Says how each one ended: `exit <code>`, `killed after the grace period`, or `not running`."""
        ended: dict[str, str] = {}
        signalled = []
        for node_id in node_ids:
            node = self.nodes[node_id]
            if node.paused:
                self.resume(node_id)
            if self._signal(node, signal.SIGTERM):
                signalled.append(node_id)
            else:
                ended[node_id] = "not running"
        deadline = time.monotonic() + STOP_GRACE_S
        for node_id in signalled:
            process = self.nodes[node_id].process
            try:
                ended[node_id] = f"exit {process.wait(max(0.0, deadline - time.monotonic()))}"
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                ended[node_id] = "killed after the grace period"
        return ended

    def pause(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if not self._signal(node, signal.SIGSTOP):
            return False
        node.paused = True
        return True

    def resume(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if not self._signal(node, signal.SIGCONT):
            return False
        node.paused = False
        return True

    def restart(self, node_id: str, clock_offset_ms: int = 0, hard: bool = True) -> NodeProcess:
        if hard:
            self.kill(node_id)
        else:
            self.stop(node_id)
        return self.start(node_id, clock_offset_ms)

    def set_clock(self, node_id: str, offset_ms: int) -> dict:
        """Moves a running node's clock through its test-hooks route (no restart). The node's
        answer, or {"error": ...} when it did not take the offset."""
        node = self.nodes[node_id]
        if not node.alive() or node.paused:
            return {"error": "not running"}
        request = urllib.request.Request(
            node.base_url + CLOCK_ROUTE, data=json.dumps({"offsetMs": int(offset_ms)}).encode(), method="POST",
            headers={"Authorization": f"Bearer {TOKEN_ADMIN}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=CLOCK_REQUEST_TIMEOUT_S) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return {"error": f"HTTP {error.code}", "body": error.read()[:200].decode("utf-8", "replace")}
        except (OSError, ValueError) as error:
            return {"error": f"{type(error).__name__}: {error}"}
        node.runtime_clock_offset_ms = int(answer.get("offsetMs", offset_ms))
        return answer

    def close(self) -> None:
        """Ends every node this cluster started (by PID) and the proxies."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                if node.paused:
                    self._signal(node, signal.SIGCONT)
                self._signal(node, signal.SIGKILL)
                node.process.wait()
        self.network.close()

    # -- health ----------------------------------------------------------------------------------

    def health(self, node_id: str) -> dict | None:
        """The node's /health body (200 or 503), or None when it does not answer."""
        node = self.nodes[node_id]
        if not node.alive() or node.paused:
            return None
        request = urllib.request.Request(node.base_url + "/health")
        try:
            with urllib.request.urlopen(request, timeout=HEALTH_REQUEST_TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            try:
                return json.loads(error.read() or b"{}")
            except ValueError:
                return None
        except (OSError, ValueError):
            return None

    def leader(self, tenant: str = TENANT) -> str | None:
        """The node that says it leads the tenant's group in the highest term, if any answers."""
        best: tuple[int, str] | None = None
        for node_id in self.nodes:
            body = self.health(node_id)
            group = ((body or {}).get("groups") or {}).get(tenant) or {}
            if group.get("role") == "leader":
                term = int(group.get("term") or 0)
                if best is None or term > best[0]:
                    best = (term, node_id)
        return best[1] if best else None

    def wait_answering(self, node_id: str, timeout_s: float = START_ANSWER_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.health(node_id) is not None:
                return True
            if not self.nodes[node_id].alive():
                return False
            time.sleep(HEALTH_POLL_S)
        return False

    def wait_healthy(self, timeout_s: float) -> bool:
        """True once every running node reports status healthy (every group has a leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            bodies = [self.health(node_id) for node_id, node in self.nodes.items() if node.alive()]
            if bodies and all(body is not None and body.get("status") == "healthy" for body in bodies):
                return True
            time.sleep(HEALTH_POLL_S)
        return False

    def describe(self) -> dict:
        return {
            "config": os.path.relpath(self.config_path, REPO_ROOT),
            "nodes": {
                node.id: {
                    "http": node.base_url,
                    "raft": node.raft_address,
                    "pid": node.pid,
                    "dial": self.dial_maps[node.id],
                }
                for node in self.nodes.values()
            },
        }
