"""`queen-raft kv get|put|delete`: the replicated KV store from a terminal.

Output and exit codes as in output.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from queen_raft.cli.output import client_command, duration_argument, json_argument, wire
from queen_raft.client import Queen


async def kv_get(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).get(args.key))


async def kv_put(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).put(args.key, args.value, ttl=args.ttl))


async def kv_delete(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).delete(args.key))


def add_kv_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    kv = sub.add_parser("kv", help="read and write the replicated KV store")
    kv_sub = kv.add_subparsers(dest="kv_command", required=True)
    get = client_command(kv_sub, "get", kv_get, common, "one key")
    get.add_argument("ns")
    get.add_argument("key")
    put = client_command(kv_sub, "put", kv_put, common, "write one key")
    put.add_argument("ns")
    put.add_argument("key")
    put.add_argument("value", type=json_argument, help="a JSON value")
    put.add_argument("--ttl", default=None, type=duration_argument, help="'7d', '1h', ... (whole seconds); none: no expiry")
    delete = client_command(kv_sub, "delete", kv_delete, common, "delete one key (found: whether a live key was deleted)")
    delete.add_argument("ns")
    delete.add_argument("key")
