"""`queen-raft cluster backup` and `queen-raft cluster restore` (logic in queen_raft/backup/).

Each prints a line per tenant and a last line on stdout; on a terminal, progress bars on stderr
show the download of each tenant's snapshot, and for a restore the checksums and the seeding
(progress.py)."""

from __future__ import annotations

import argparse
import ssl
import sys
from pathlib import Path

from queen_raft.backup.manifest import BackupRefused
from queen_raft.config import load_config

# sysexits' EX_DATAERR for a refused backup or target: the input is wrong, retrying won't help.
EXIT_REFUSED = 65


def _token_pairs(values: list[str]) -> dict[str, str]:
    pairs = {}
    for value in values:
        tenant, sep, token = value.partition("=")
        if not sep or not tenant or not token:
            raise BackupRefused(f"--token {value!r}: expected TENANT=TOKEN")
        pairs[tenant] = token
    return pairs


def cmd_backup(args: argparse.Namespace) -> int:
    from queen_raft.backup.take import admin_tokens, take_backup
    from queen_raft.cli.progress import open_bar, print_line

    config = load_config(args.config)
    context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    try:
        take_backup(config, args.out, admin_tokens(config, _token_pairs(args.token)), context,
                    progress=print_line, open_bar=open_bar)
    except BackupRefused as exc:
        print(f"backup refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from queen_raft.backup.restore import restore_backup  # imports pysyncobj
    from queen_raft.cli.progress import open_bar, print_line

    config = load_config(args.config)
    try:
        restore_backup(config, getattr(args, "from"), args.node or None, progress=print_line, open_bar=open_bar)
    except BackupRefused as exc:
        print(f"restore refused, nothing changed: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def add_backup_commands(cluster_sub: argparse._SubParsersAction) -> None:
    backup = cluster_sub.add_parser("backup", help="snapshot every tenant of a serving cluster into a directory")
    backup.add_argument("--config", type=Path, required=True)
    backup.add_argument("--out", type=Path, required=True, help="a new or empty directory")
    backup.add_argument("--token", action="append", default=[], metavar="TENANT=TOKEN",
                        help="an admin token of the tenant (repeat per tenant; default: a plaintext admin "
                             "token of the config)")
    backup.set_defaults(handler=cmd_backup)
    restore = cluster_sub.add_parser("restore", help="seed the empty data dirs of a stopped cluster from a backup")
    restore.add_argument("--config", type=Path, required=True)
    restore.add_argument("--from", type=Path, required=True, help="a directory written by `cluster backup`")
    restore.add_argument("--node", action="append", default=[], metavar="ID",
                         help="seed only this node (repeat; default: every node of the config, i.e. all on "
                              "this machine)")
    restore.set_defaults(handler=cmd_restore)
