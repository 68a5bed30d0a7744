"""Nodes run by the `queen-raft cluster` commands themselves (`cluster up`, `cluster start`), not by
the test: a written config (cluster_fixture.NodeCluster picks the free ports), the CLI as a
subprocess, and what the nodes say over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cluster_fixture import REPO, TENANTS, NodeCluster, http_call

# The interpreter and the CLI import in well under a second; the rest is a loaded machine.
CLI_TIMEOUT_S = 60
POLL_INTERVAL_S = 0.05


def written_config(workdir: Path, node_count: int = 3) -> NodeCluster:
    """A cluster config on free ports; no node started."""
    cluster = NodeCluster(workdir, node_count=node_count)
    cluster.workdir.mkdir(parents=True, exist_ok=True)
    cluster.write_config()
    return cluster


def cli(*args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queen_raft", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def node_cli(cluster: NodeCluster, command: str, node_id: str) -> subprocess.CompletedProcess:
    return cli("cluster", command, node_id, "--config", str(cluster.config_path))


def health(cluster: NodeCluster, node_id: str, timeout: float = 1.0) -> tuple[int, dict | None]:
    status, _, body = http_call(f"{cluster.url(node_id)}/health", timeout=timeout)
    return status, body if isinstance(body, dict) else None


def leaders(cluster: NodeCluster, node_ids: list[str] | None = None) -> dict[str, str]:
    """Per tenant, the node that answers as its leader (tenants with none are absent)."""
    found = {}
    for node_id in node_ids or cluster.node_ids:
        status, body = health(cluster, node_id)
        if body and body.get("node") == node_id:
            for tenant, group in body["groups"].items():
                if group.get("role") == "leader":
                    found[tenant] = node_id
    return found


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def wait_all_healthy(cluster: NodeCluster, timeout_s: float = 30.0) -> None:
    wait_for(lambda: all(health(cluster, n)[0] == 200 for n in cluster.node_ids) and len(leaders(cluster)) == len(TENANTS),
             timeout_s, "every node answers 200 and every group has a leader")


def pid_of(cluster: NodeCluster, node_id: str) -> int | None:
    try:
        return int((cluster.data_dir / "run" / f"{node_id}.pid").read_text())
    except (OSError, ValueError):
        return None


def is_node(cluster: NodeCluster, pid: int, node_id: str) -> bool:
    """Alive, not a zombie, and running that node of this cluster (by /proc/PID/cmdline)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return False
    return "node" in args and node_id in args and str(cluster.config_path.resolve()) in args


def stop_every_node(cluster: NodeCluster) -> None:
    """Cleanup: SIGKILL to each node still running under its pid file (the test failed midway)."""
    for node_id in cluster.node_ids:
        pid = pid_of(cluster, node_id)
        if pid is not None and is_node(cluster, pid, node_id):
            os.kill(pid, signal.SIGKILL)
