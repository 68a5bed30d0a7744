"""`queen-raft push` and `queen-raft pop`, and the payload options a pushed message and a
scheduled timer share.

Output and exit codes as in output.py.
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

from queen_raft.cli.output import client_command, duration_argument, json_argument, wire
from queen_raft.client import Queen


def payload_of(args: argparse.Namespace) -> Any:
    """The one payload source given: JSON text, a file's bytes, or base64 bytes."""
    if args.payload_file is not None:
        return Path(args.payload_file).read_bytes()
    if args.payload_b64 is not None:
        return base64.b64decode(args.payload_b64, validate=True)
    return args.payload


def payload_options(parser: argparse.ArgumentParser, required: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--payload", type=json_argument, help="a JSON value, e.g. '{\"orderId\": 9137}'")
    source.add_argument("--payload-file", help="raw bytes from a file")
    source.add_argument("--payload-b64", help="raw bytes, base64")


async def push(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.push(args.queue, payload_of(args), partition=args.partition, txn=args.txn))


async def pop(q: Queen, args: argparse.Namespace) -> Any:
    messages = await q.pop(args.queue, group=args.group, partition=args.partition, batch=args.batch,
                           wait=args.wait, auto_ack=args.auto_ack)
    if args.ack:
        for message in messages:
            await message.ack()
    return {"leaseId": messages[0].lease_id if messages else None, "messages": [m.raw for m in messages]}


def add_message_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    push_parser = client_command(sub, "push", push, common, "push one message")
    push_parser.add_argument("queue")
    payload_options(push_parser, required=True)
    push_parser.add_argument("--partition")
    push_parser.add_argument("--txn", help="the transactionId (minted when absent)")

    pop_parser = client_command(sub, "pop", pop, common, "pop messages (takes a lease unless --auto-ack)")
    pop_parser.add_argument("queue")
    pop_parser.add_argument("--group", help="consumer group (default: queue mode)")
    pop_parser.add_argument("--partition")
    pop_parser.add_argument("--batch", type=int, default=1)
    pop_parser.add_argument("--wait", default=None, type=duration_argument, help="long-poll up to this long, e.g. '5s'")
    settle = pop_parser.add_mutually_exclusive_group()
    settle.add_argument("--auto-ack", action="store_true", help="the server settles them at once, no lease")
    settle.add_argument("--ack", action="store_true", help="ack each message before printing them")
