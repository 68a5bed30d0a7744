"""The data commands of `queen-raft`: timer schedule|cancel|peek|list, push, pop, kv get|put|delete.

The operator commands (dlq, admin, usage, queue configure) are in cli_operator.py, the settling and
all-or-nothing ones (transaction, ack, lease extend) in cli_transaction.py; output and exit codes
(0 answer, 1 refused, 2 usage, 3 unreachable) are shared, see cli_common.py.
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

from queen_raft.cli_common import (  # noqa: F401  (the exit codes are re-exported for callers and tests)
    CLI_RETRY_BUDGET_S, EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, client_command, connection_options,
    duration_argument, json_argument, run_client_command, wire,
)
from queen_raft.cli_operator import add_operator_commands
from queen_raft.cli_transaction import add_transaction_commands
from queen_raft.client import Queen


def _payload_of(args: argparse.Namespace) -> Any:
    """The one payload source given: JSON text, a file's bytes, or base64 bytes."""
    if args.payload_file is not None:
        return Path(args.payload_file).read_bytes()
    if args.payload_b64 is not None:
        return base64.b64decode(args.payload_b64, validate=True)
    return args.payload


async def timer_schedule(q: Queen, args: argparse.Namespace) -> Any:
    timer = q.timer(args.queue).key(args.key).delay(args.delay).payload(_payload_of(args), zstd=args.zstd)
    if args.partition:
        timer = timer.partition(args.partition)
    if args.txn:
        timer = timer.txn(args.txn)
    return wire(await timer.schedule())


async def timer_cancel(q: Queen, args: argparse.Namespace) -> Any:
    timer = q.timer(args.queue).key(args.key)
    if args.txn:
        timer = timer.txn(args.txn)
    return wire(await timer.cancel())


async def timer_peek(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.timer(args.queue).key(args.key).peek())


async def timer_list(q: Queen, args: argparse.Namespace) -> Any:
    timers = q.timer(args.queue)
    if args.all:
        rows = [wire(row) async for row in timers.rows(page_size=args.limit, after=args.after)]
        return {"rows": [{k: v for k, v in row.items() if k != "found"} for row in rows], "truncated": False,
                "nextAfter": None}
    return wire(await timers.list(limit=args.limit, after=args.after))


async def push(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.push(args.queue, _payload_of(args), partition=args.partition, txn=args.txn))


async def pop(q: Queen, args: argparse.Namespace) -> Any:
    messages = await q.pop(args.queue, group=args.group, partition=args.partition, batch=args.batch,
                           wait=args.wait, auto_ack=args.auto_ack)
    if args.ack:
        for message in messages:
            await message.ack()
    return {"leaseId": messages[0].lease_id if messages else None, "messages": [m.raw for m in messages]}


async def kv_get(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).get(args.key))


async def kv_put(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).put(args.key, args.value, ttl=args.ttl))


async def kv_delete(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.kv(args.ns).delete(args.key))


def _payload_options(parser: argparse.ArgumentParser, required: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--payload", type=json_argument, help="a JSON value, e.g. '{\"orderId\": 9137}'")
    source.add_argument("--payload-file", help="raw bytes from a file")
    source.add_argument("--payload-b64", help="raw bytes, base64")


def add_client_commands(sub: argparse._SubParsersAction) -> None:
    common = connection_options()

    timer = sub.add_parser("timer", help="schedule, cancel, peek and list timers")
    timer_sub = timer.add_subparsers(dest="timer_command", required=True)
    schedule = client_command(timer_sub, "schedule", timer_schedule, common, "schedule (or reschedule) a timer")
    schedule.add_argument("queue")
    schedule.add_argument("key")
    schedule.add_argument("--delay", required=True, type=duration_argument, help="'250ms', '30s', '15m', '72h', '7d' or ms")
    _payload_options(schedule, required=True)
    schedule.add_argument("--partition")
    schedule.add_argument("--txn", help="the fired message's transactionId (minted when absent)")
    schedule.add_argument("--zstd", action="store_true", help="compress the payload (payloadZstd)")
    cancel = client_command(timer_sub, "cancel", timer_cancel, common, "cancel a timer (DELETE: never refused by pause, rate or quota)")
    cancel.add_argument("queue")
    cancel.add_argument("key")
    cancel.add_argument("--txn", help="echoed in the answer: the transactionId to look for when it is absent")
    peek = client_command(timer_sub, "peek", timer_peek, common, "one pending timer, payload included")
    peek.add_argument("queue")
    peek.add_argument("key")
    listing = client_command(timer_sub, "list", timer_list, common, "a queue's pending timers, by key")
    listing.add_argument("queue")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--after", help="exclusive cursor: the nextAfter of the previous page")
    listing.add_argument("--all", action="store_true", help="follow nextAfter through every page")

    push_parser = client_command(sub, "push", push, common, "push one message")
    push_parser.add_argument("queue")
    _payload_options(push_parser, required=True)
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

    add_operator_commands(sub, common)
    add_transaction_commands(sub, common)
