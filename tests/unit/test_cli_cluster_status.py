"""`queen-raft cluster status` rendered from fake /health answers: the peer links column and the
line below the table that names every link not on aead."""

from __future__ import annotations

from pathlib import Path

import pytest

from queen_raft.cli import cluster_health
from queen_raft.cli.cluster_health import cluster_status_lines
from queen_raft.config import load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def config():
    return load_config(REPO / "cluster_configs" / "local-3.toml")


def group(config, leader_id: str, role: str, links: dict[str, str], tenant: str = "acme") -> dict:
    index = config.tenant(tenant).index
    addr = {n.id: n.raft_addr(index) for n in config.nodes}
    return {"role": role, "leader": addr[leader_id], "term": 3, "commitIndex": 12, "appliedIndex": 11,
            "problem": None, "peerLinks": {addr.get(peer, peer): frame for peer, frame in links.items()}}


def serve_health(monkeypatch, config, bodies: dict[str, dict | None]) -> None:
    urls = {n.http_url: n.id for n in config.nodes}

    def fake_fetch(url, timeout_s=None):
        body = bodies[urls[url]]
        return (0, None) if body is None else (200, body)
    monkeypatch.setattr(cluster_health, "fetch_health", fake_fetch)


def rows(lines: list[str]) -> list[list[str]]:
    return [line.split() for line in lines[1:] if not line.startswith("peer links")]


def test_each_rows_links_name_the_peers_by_node_id_and_the_last_columns_stay(monkeypatch, config):
    serve_health(monkeypatch, config, {
        "n1": {"status": "healthy", "groups": {"acme": group(config, "n1", "leader", {"n3": "fernet", "n2": "aead"})}},
        "n2": {"status": "healthy", "groups": {"acme": group(config, "n1", "follower", {"n1": "aead", "n3": "none"})}},
        "n3": None,
    })
    lines = cluster_status_lines(config)
    assert lines[0].split() == ["node", "pid", "tenant", "role", "leader", "links", "term", "commit", "applied"]
    n1, n2, n3 = rows(lines)
    assert n1[:5] == ["n1", "-", "acme", "leader", "n1"] and n1[-4:] == ["n2:aead,n3:fernet", "3", "12", "11"]
    assert n2[-4:] == ["n1:aead,n3:down", "3", "12", "11"]
    assert n3[:3] == ["n3", "-", "(no"]
    assert lines[-1] == "peer links not on aead: n1->n3 fernet (acme), n2->n3 down (acme)"
    # The header's columns line up with the rows'.
    assert lines[0].index("links") == lines[1].index("n2:aead")


def test_no_line_below_the_table_once_every_link_is_on_aead(monkeypatch, config):
    serve_health(monkeypatch, config, {
        node.id: {"status": "healthy", "groups": {
            tenant.name: group(config, "n2", "leader" if node.id == "n2" else "follower",
                               {peer.id: "aead" for peer in config.nodes if peer.id != node.id}, tenant.name)
            for tenant in config.tenants}}
        for node in config.nodes})
    lines = cluster_status_lines(config)
    assert len(lines) == 1 + len(config.nodes) * len(config.tenants)
    assert {row[-4] for row in rows(lines)} == {"n2:aead,n3:aead", "n1:aead,n3:aead", "n1:aead,n2:aead"}


def test_an_unknown_address_is_shown_as_itself_and_unreported_links_as_such(monkeypatch, config):
    older = group(config, "n1", "follower", {})
    del older["peerLinks"]  # a node of a version that does not report its links
    serve_health(monkeypatch, config, {
        "n1": {"status": "healthy", "groups": {"acme": group(config, "n1", "leader", {"10.0.0.9:7400": "aead", "n2": "plain"})}},
        "n2": {"status": "healthy", "groups": {"acme": older}},
        "n3": {"status": "healthy", "groups": {"acme": group(config, "n1", "follower", {})}},  # a group of one
    })
    lines = cluster_status_lines(config)
    n1, n2, n3 = rows(lines)
    assert n1[-4] == "n2:plain,10.0.0.9:7400:aead"
    assert n2[-4] == "unreported"
    assert n3[-4] == "-"
    assert lines[-1] == "peer links not on aead: n1->n2 plain (acme)"
