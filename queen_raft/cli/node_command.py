"""`queen-raft node`: its parser and handler, in a module that imports only what a node needs.

A node is the command a restart waits on, so the entry point parses `node ...` with this parser
alone (cli/main.py), without importing the other commands, the SDK they call the API with, or
their progress bars. The full parser adds the same `node` command, so `queen-raft --help` lists it
and both parse it alike.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from queen_raft.config import ConfigError, load_config
from queen_raft.tls_trust import CACERT_ENV, client_ssl_context


def cmd_node(args: argparse.Namespace) -> int:
    from queen_raft.node import run_node  # imports pysyncobj: only the node needs it

    config = load_config(args.config)
    run_node(config, args.id)
    return 0


def refuse_unreadable_ca_file() -> None:
    """A node calls its peers over https:// with QUEEN_CACERT: a CA file it cannot read stops
    it at the start (config error), as it stops every other command (cluster_health.export_cacert)."""
    if os.environ.get(CACERT_ENV):
        try:
            client_ssl_context()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def add_node_command(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="run one node: every tenant group and the HTTP API")
    node.add_argument("--config", type=Path, default=None, help="cluster TOML (default: cluster_configs/single.toml)")
    node.add_argument("--id", default=None, help="this node's id in the config (default: the only node)")
    node.set_defaults(handler=cmd_node)


def node_parser(prog: str) -> argparse.ArgumentParser:
    """A parser of the `node` command alone (what `prog node ...` parses to with the full one)."""
    parser = argparse.ArgumentParser(prog=prog, description="A Raft-replicated timer service.")
    add_node_command(parser.add_subparsers(dest="command", required=True))
    return parser
