"""The `queen-raft` command line: its parser and entry point.

Each group of commands lives in its own module and registers itself here: node_command.py (node),
cluster.py (cluster up|status), timers.py (timer schedule|cancel|peek|list), messages.py (push,
pop), kv.py (kv get|put|delete), operator.py (dlq, admin, usage, queue configure) and
transaction.py (transaction, ack, lease extend). Output and exit codes of the client commands are
in output.py. `node ...` is parsed by the node's parser alone, so a node's start imports none of
the other modules.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from queen_raft.cli.node_command import node_parser, refuse_unreadable_ca_file
from queen_raft.config import ConfigError, load_config

PROG = "queen-raft"


def build_parser() -> argparse.ArgumentParser:
    # Imported here: `queen-raft node` parses with node_parser alone and never needs them.
    from queen_raft.cli.cluster import add_cluster_commands
    from queen_raft.cli.kv import add_kv_commands
    from queen_raft.cli.messages import add_message_commands
    from queen_raft.cli.operator import add_operator_commands
    from queen_raft.cli.output import connection_options, installed_version
    from queen_raft.cli.timers import add_timer_commands
    from queen_raft.cli.transaction import add_transaction_commands

    parser = argparse.ArgumentParser(prog=PROG, description="A Raft-replicated timer service.")
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


# What a shell reports for a command the SIGPIPE signal ended (128 + 13), as `git log | head` does.
EXIT_READER_GONE = 141


def main(argv: list[str] | None = None) -> int:
    """The entry point. A reader that stops reading (`queen-raft cluster status | head`) ends the
    command quietly: no traceback, nothing more written, exit 141 like a Unix tool that SIGPIPE
    ended. Python ignores SIGPIPE, so the closed pipe arrives as BrokenPipeError instead."""
    try:
        try:
            return _run(argv)
        finally:
            # Flushed here, inside the try, rather than by the interpreter at exit, where a
            # closed pipe could only be reported as "Exception ignored".
            sys.stdout.flush()
    except BrokenPipeError:
        # What is left in stdout's buffer is flushed again at exit: point the descriptor at
        # /dev/null so that flush does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_READER_GONE


def _run(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = node_parser(PROG) if words[:1] == ["node"] else build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("QUEEN_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "node":
            refuse_unreadable_ca_file()
        else:
            from queen_raft.cli.cluster_health import export_cacert

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

