"""`queen-raft cluster up` never reports what it did not start: a taken port refuses the start with
the port and its holder, a node that exits has the end of its log shown, and "is up" needs each
node to answer /health with its own id and cluster name."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_fixture import REPO, TENANTS, NodeCluster

pytestmark = pytest.mark.integration

LAUNCH_TIMEOUT_S = 60
# Configs tried before a test gives up finding a port it can hold (see hold_a_node_port).
HOLD_ATTEMPTS = 5


def cluster_up(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queen_raft", "cluster", "up", "--config", str(config)],
                          cwd=REPO, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)


def config_for(tmp_path: Path) -> NodeCluster:
    cluster = NodeCluster(tmp_path, node_count=1)
    cluster.write_config()
    return cluster


def hold_a_node_port(tmp_path: Path, which: str) -> tuple[NodeCluster, socket.socket, int]:
    """A one-node config and a listening socket on one of its ports. The config's ports were free
    when it was written; another process may take one before we bind it, so a port found taken
    meanwhile is given up for a new config."""
    for attempt in range(HOLD_ATTEMPTS):
        directory = tmp_path / f"attempt-{attempt}"
        directory.mkdir()
        cluster = config_for(directory)
        port = cluster.http_ports["n1"] if which == "http" else cluster.raft_ports["n1"] + len(TENANTS) - 1
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", port))
        except OSError as exc:
            holder.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        holder.listen()
        return cluster, holder, port
    pytest.fail(f"every port picked in {HOLD_ATTEMPTS} configs was taken before it could be held")


@pytest.mark.parametrize("which", ["http", "raft"])
def test_a_taken_port_refuses_the_start_and_names_the_port_and_its_holder(tmp_path, which):
    cluster, holder, port = hold_a_node_port(tmp_path, which)
    with holder:
        run = cluster_up(cluster.config_path)
    assert run.returncode == 2  # a refusal before anything starts, like the node commands'
    assert "is up" not in run.stdout
    assert f"127.0.0.1:{port} is in use by pid {os.getpid()}" in run.stderr
    assert not (cluster.data_dir / "logs").exists()  # nothing was started


def test_a_node_that_exits_has_the_end_of_its_log_shown(tmp_path):
    cluster = config_for(tmp_path)
    cluster.data_dir.mkdir(parents=True)
    (cluster.data_dir / "n1").write_text("not a directory")  # the node cannot create its data dir
    run = cluster_up(cluster.config_path)
    assert run.returncode == 1
    assert "is up" not in run.stdout
    assert "exit status 1), the end of its log:" in run.stderr
    assert "  | " in run.stderr  # the log's own lines follow
