"""The `queen-raft` command line: its parser and entry point.

Each group of commands lives in its own module and registers itself here: cluster.py (node, cluster
up|status), timers.py (timer schedule|cancel|peek|list), messages.py (push, pop), kv.py (kv
get|put|delete), operator.py (dlq, admin, usage, queue configure) and transaction.py (transaction,
ack, lease extend). Output and exit codes of the client commands are in output.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from queen_raft.cli.cluster import add_cluster_commands
from queen_raft.cli.cluster_health import export_cacert
from queen_raft.cli.kv import add_kv_commands
from queen_raft.cli.messages import add_message_commands
from queen_raft.cli.operator import add_operator_commands
from queen_raft.cli.output import connection_options, installed_version
from queen_raft.cli.timers import add_timer_commands
from queen_raft.cli.transaction import add_transaction_commands
from queen_raft.config import ConfigError, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queen-raft", description="A Raft-replicated timer service.")
    parser.add_argument("--version", action="version", version=f"queen-raft {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_cluster_commands(sub)
    common = connection_options()
    add_timer_commands(sub, common)
    add_message_commands(sub, common)
    add_kv_commands(sub, common)
    add_operator_commands(sub, common)
    add_transaction_commands(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("QUEEN_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        export_cacert(args)
        if args.command == "node" and args.id is None:
            config = load_config(args.config)
            if len(config.nodes) != 1:
                raise ConfigError(f"{config.source} has {len(config.nodes)} nodes: say which with --id")
            args.id = config.nodes[0].id
        return args.handler(args)
    except ConfigError as exc:
        print(f"queen-raft: config error: {exc}", file=sys.stderr)
        return 2

