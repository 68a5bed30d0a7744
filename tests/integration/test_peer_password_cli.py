"""The Raft password from the command line: a node without one refuses to start, and `cluster up`
gives a dev config one (a 0600 file in the data dir) that all its nodes use."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from cluster_fixture import REPO, pick_port_runs

pytestmark = pytest.mark.integration

# A refusing node exits while reading its config, well within this.
NODE_REFUSAL_TIMEOUT_S = 30
# Two nodes start and elect in a few seconds; the rest is a loaded 2-core machine.
CLUSTER_UP_TIMEOUT_S = 60.0
LAUNCHER_STOP_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1
PASSWORD_VARIABLES = ("QUEEN_RAFT_PASSWORD", "QUEEN_RAFT_PASSWORD_FILE")


def environment_without_a_password() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PASSWORD_VARIABLES}


def write_loopback_config(tmp_path, node_count: int) -> tuple:
    ports = pick_port_runs(2 * node_count, 1)
    data_dir = tmp_path / "data"
    lines = ["[cluster]", 'name = "pw"', f'data_dir = "{data_dir}"', ""]
    urls = []
    for i in range(node_count):
        http_port, raft_port = ports[2 * i], ports[2 * i + 1]
        urls.append(f"http://127.0.0.1:{http_port}")
        lines += ["[[nodes]]", f'id = "n{i + 1}"', 'host = "127.0.0.1"', f"http_port = {http_port}",
                  f"raft_port = {raft_port}", ""]
    lines += ["[[tenants]]", 'name = "acme"', "[[tenants.tokens]]", 'token = "acme-admin"', 'level = "admin"']
    config = tmp_path / "cluster.toml"
    config.write_text("\n".join(lines) + "\n")
    return config, data_dir, urls


def test_a_loopback_node_without_a_raft_password_refuses_to_start(tmp_path):
    config, data_dir, _ = write_loopback_config(tmp_path, 1)
    try:
        result = subprocess.run([sys.executable, "-m", "queen_raft", "node", "--config", str(config)], cwd=REPO,
                                env=environment_without_a_password(), capture_output=True, text=True,
                                timeout=NODE_REFUSAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail("the node started without a Raft password")
    assert result.returncode == 2, result.stderr
    assert "no Raft password" in result.stderr and "QUEEN_RAFT_PASSWORD" in result.stderr
    assert not (data_dir / "raft-password").exists()  # a node never invents one: its peers could not know it


def health_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_cluster_up_gives_a_dev_config_a_password_its_nodes_share(tmp_path):
    config, data_dir, urls = write_loopback_config(tmp_path, 2)
    with open(tmp_path / "launcher.log", "wb") as log:
        launcher = subprocess.Popen([sys.executable, "-m", "queen_raft", "cluster", "up", "--config", str(config)],
                                    cwd=REPO, env=environment_without_a_password(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + CLUSTER_UP_TIMEOUT_S
        # Both nodes healthy: each group of two has a leader, which takes both, so their
        # handshakes (Fernet, keyed by the password) succeeded.
        while not all(health_status(url) == 200 for url in urls):
            assert launcher.poll() is None, (tmp_path / "launcher.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "launcher.log").read_text()
            time.sleep(POLL_INTERVAL_S)
        password_file = data_dir / "raft-password"
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        assert len(password_file.read_text().strip()) >= 40
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait(timeout=LAUNCHER_STOP_TIMEOUT_S)
