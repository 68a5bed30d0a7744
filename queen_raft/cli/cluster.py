"""`queen-raft node` and `queen-raft cluster up|status|start|stop|kill|restart|restart-all`: the
commands that run nodes from a cluster config and report on them, rather than call the API of a
running cluster. `cluster up` is cluster_up.py, the one-node commands node_control.py, the rolling
restart rolling.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from queen_raft.cli.backup import add_backup_commands
from queen_raft.cli.cluster_health import add_cacert_options, cluster_status_lines, fetch_health
from queen_raft.cli.cluster_up import run_cluster
from queen_raft.cli.node_command import add_node_command
from queen_raft.cli.node_control import add_node_control_commands
from queen_raft.cli.rolling import add_rolling_restart_command
from queen_raft.config import load_config


def cmd_cluster_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    for line in cluster_status_lines(config, Path(args.config)):
        print(line)
    healthy = all(fetch_health(n.http_url)[0] == 200 for n in config.nodes)
    return 0 if healthy else 1


def cmd_cluster_up(args: argparse.Namespace) -> int:
    """Starts (or adopts) every node of the config, waits until every group has a leader, prints
    how to use it, and supervises the nodes until Ctrl-C, SIGTERM or SIGHUP stops them by PID."""
    config = load_config(args.config)
    return run_cluster(config, Path(args.config))


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    add_node_command(sub)
    cluster = sub.add_parser("cluster", help="operate a whole cluster from its config")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", help="start every node, wait for leaders, stop all on Ctrl-C")
    up.add_argument("--config", type=Path, required=True)
    up.set_defaults(handler=cmd_cluster_up)
    status = cluster_sub.add_parser("status", help="each group's leader, peer links, term, commit and applied index")
    status.add_argument("--config", type=Path, required=True)
    status.set_defaults(handler=cmd_cluster_status)
    add_node_control_commands(cluster_sub)
    add_rolling_restart_command(cluster_sub)
    add_backup_commands(cluster_sub)
    add_cacert_options(cluster_sub)
