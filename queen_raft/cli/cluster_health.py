"""What the nodes of a cluster say about themselves: GET /health of each, and `cluster status`'s table
(its peer links: peer_link_text.py)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from queen_raft.cli.node_pids import running_pid
from queen_raft.cli.peer_link_text import links_cell, links_summary, named_links, not_on_aead
from queen_raft.client.tls import CACERT_ENV, client_ssl_context
from queen_raft.config import ClusterConfig, ConfigError

HEALTH_TIMEOUT_S = 2.0


def add_cacert_options(cluster_commands: argparse._SubParsersAction) -> None:
    """`--cacert FILE` on every `cluster` command, for a cluster that serves HTTPS."""
    for parser in cluster_commands.choices.values():
        parser.add_argument("--cacert", default=None, metavar="FILE",
                            help="PEM file of the CA that signed the nodes' certificates, for a cluster over "
                                 f"HTTPS (default: {CACERT_ENV}, else the system's trust store)")


def export_cacert(args: argparse.Namespace) -> None:
    """`--cacert` becomes this process's QUEEN_CACERT: every health poll reads it, and the nodes
    that `cluster up|start|restart` launch inherit it for their calls to one another. A CA file
    that cannot be read stops the command here, instead of every node reading as unreachable."""
    cacert = getattr(args, "cacert", None)
    if cacert:
        os.environ[CACERT_ENV] = str(cacert)
    if os.environ.get(CACERT_ENV):
        try:
            client_ssl_context()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def fetch_health(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> tuple[int, dict | None]:
    """(HTTP status, body) of GET /health; (0, None) when the node does not answer. An https://
    node is verified against QUEEN_CACERT (or the system's trust store)."""
    context = client_ssl_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, None
    except (OSError, ValueError):
        return 0, None


def cluster_status_lines(config: ClusterConfig, config_path: Path | None = None) -> list[str]:
    """One row per node and tenant, then the peer links not on aead (peer_link_text.py). `pid` is
    the node's process on this machine, by its pid file (`-` when it has none here: not started by
    queen-raft cluster, or on another machine)."""
    lines = [f"{'node':<6} {'pid':>8} {'tenant':<16} {'role':<10} {'leader':<28} {'links':<20} {'term':>6} "
             f"{'commit':>8} {'applied':>8}"]
    # /health names a leader and each peer link by its Raft address; say which node that is.
    node_by_raft_addr = {n.raft_addr(t.index): n.id for n in config.nodes for t in config.tenants}
    node_order = [n.id for n in config.nodes]
    off_aead: list[str] = []
    for node in config.nodes:
        pid = running_pid(config, config_path, node.id) if config_path is not None else None
        pid_text = str(pid) if pid is not None else "-"
        status, body = fetch_health(node.http_url)
        if body is None:
            state = "not running" if config_path is not None and pid is None else "running"
            lines.append(f"{node.id:<6} {pid_text:>8} (no answer from {node.http_url}; {state})")
            continue
        for tenant, group in body.get("groups", {}).items():
            leader = group.get("leader")
            leader_text = f"{node_by_raft_addr.get(leader, '?')} ({leader})" if leader else "-"
            links = named_links(group.get("peerLinks"), node_by_raft_addr, node_order)
            off_aead += not_on_aead(node.id, tenant, links)
            lines.append(
                f"{node.id:<6} {pid_text:>8} {tenant:<16} {str(group.get('role')):<10} {leader_text:<28} "
                f"{links_cell(links):<20} {group.get('term')!s:>6} {group.get('commitIndex')!s:>8} "
                f"{group.get('appliedIndex')!s:>8}"
            )
    return lines + links_summary(off_aead)
