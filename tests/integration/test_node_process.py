"""The node process and the CLI around it: leadership log lines, cluster status, config refusals."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from cluster_fixture import REPO, TENANTS, node_cluster  # noqa: F401  (node_cluster is a fixture)

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 30
LINKS_TIMEOUT_S = 15


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queen_raft", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def status_rows(stdout: str) -> list[list[str]]:
    """The table's rows, without its header and the peer-links line below it."""
    return [line.split() for line in stdout.splitlines()[1:] if not line.startswith("peer links not on aead:")]


def test_cluster_status_shows_every_group_on_every_node(node_cluster):
    result = run_cli("cluster", "status", "--config", str(node_cluster.config_path))
    assert result.returncode == 0, result.stderr
    # node, pid ("-": the fixture's nodes have no pid file), tenant, role, leader, ..., links, term, commit, applied
    rows = status_rows(result.stdout)
    assert {(row[0], row[1], row[2]) for row in rows} == {(n, "-", t) for n in node_cluster.node_ids for t in TENANTS}
    for tenant in TENANTS:
        roles = sorted(row[3] for row in rows if row[2] == tenant)
        assert roles == ["follower", "follower", "leader"]
        leader_node = next(row[0] for row in rows if row[2] == tenant and row[3] == "leader")
        assert {row[4] for row in rows if row[2] == tenant} == {leader_node}  # every node names the same leader
        assert all(int(row[-1]) >= 1 and int(row[-2]) >= 1 for row in rows)
    for row in rows:  # each node's links name its two peers by node id
        assert [link.split(":")[0] for link in row[-4].split(",")] == [n for n in node_cluster.node_ids if n != row[0]]


def test_cluster_status_shows_every_peer_link_on_aead(node_cluster):
    # A link reads `down` until its handshake is done: poll until no line names a link off aead.
    deadline = time.monotonic() + LINKS_TIMEOUT_S
    while True:
        result = run_cli("cluster", "status", "--config", str(node_cluster.config_path))
        if "peer links not on aead:" not in result.stdout:
            break
        assert time.monotonic() < deadline, result.stdout
        time.sleep(0.2)
    rows = status_rows(result.stdout)
    assert len(rows) == len(node_cluster.node_ids) * len(TENANTS)
    for row in rows:
        assert row[-4] == ",".join(f"{n}:aead" for n in node_cluster.node_ids if n != row[0]), result.stdout


def test_each_node_logs_its_leadership_changes(node_cluster):
    for node_id in node_cluster.node_ids:
        log = node_cluster.log_path(node_id).read_text()
        for tenant in TENANTS:
            assert f"leadership tenant={tenant} role=" in log, node_id
    leader = node_cluster.role_of("acme", "leader")
    assert "leadership tenant=acme role=leader" in node_cluster.log_path(leader).read_text()


def test_cluster_status_fails_when_no_node_answers(tmp_path):
    config = tmp_path / "down.toml"
    config.write_text(
        '[cluster]\nname = "down"\ndata_dir = "%s"\n[[nodes]]\nid = "n1"\nhost = "127.0.0.1"\nhttp_port = 9\n'
        'raft_port = 59990\n[[tenants]]\nname = "acme"\n[[tenants.tokens]]\ntoken = "t"\nlevel = "admin"\n' % tmp_path
    )
    result = run_cli("cluster", "status", "--config", str(config))
    assert result.returncode == 1
    assert "no answer" in result.stdout


def test_node_refuses_plaintext_tokens_on_a_non_loopback_address(tmp_path):
    config = tmp_path / "public.toml"
    config.write_text(
        '[cluster]\nname = "pub"\ndata_dir = "%s"\n[[nodes]]\nid = "n1"\nhost = "10.1.2.3"\nhttp_port = 6632\n'
        'raft_port = 7400\n[[tenants]]\nname = "acme"\n[[tenants.tokens]]\ntoken = "t"\nlevel = "admin"\n'
        '[settings]\nraft_password = "pw"\n' % tmp_path
    )
    result = run_cli("node", "--config", str(config), "--id", "n1")
    assert result.returncode == 2
    assert "plaintext tokens" in result.stderr


def test_node_with_an_unknown_id_is_refused(tmp_path):
    result = run_cli("node", "--config", str(REPO / "cluster_configs" / "local-3.toml"), "--id", "n9")
    assert result.returncode == 2
    assert "no node with id 'n9'" in result.stderr
