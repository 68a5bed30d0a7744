"""The client commands of `queen-raft`: timer schedule|cancel|peek|list, push, pop, kv get|put.

Each prints the server's JSON answer on stdout and exits 0; a refusal prints the error body
(`{"error", "message"}`) on stderr and exits EXIT_REFUSED, and a cluster nobody answers for exits
EXIT_UNREACHABLE. Nodes come from `--url` (repeatable) or QUEEN_URL (comma-separated), the token from
`--token` or QUEEN_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

from queen_raft.client import ConnectionFailed, Queen, QueenError, RetryPolicy
from queen_raft.client.durations import duration_ms
from queen_raft.client.queen import TOKEN_ENV, URL_ENV, urls_from_env

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2  # argparse's own code for a bad command line
EXIT_UNREACHABLE = 3
# Someone is waiting at a terminal: long enough to ride out an election (~0.3 s, 2 s worst after a
# kill -9), shorter than the SDK's 30 s default made for services.
CLI_RETRY_BUDGET_S = 10.0


def _print_json(value: Any, stream=None) -> None:
    print(json.dumps(value, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def _json_argument(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}); quote a string as '\"text\"'") from None


def _duration_argument(text: str) -> Any:
    """'15m', '7d', ... or bare digits, which are milliseconds like everywhere in the SDK."""
    value: Any = int(text) if text.lstrip("-").isdigit() else text
    try:
        duration_ms(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _payload_of(args: argparse.Namespace) -> Any:
    """The one payload source given: JSON text, a file's bytes, or base64 bytes."""
    if args.payload_file is not None:
        return Path(args.payload_file).read_bytes()
    if args.payload_b64 is not None:
        return base64.b64decode(args.payload_b64, validate=True)
    return args.payload


def _wire(value: Any) -> Any:
    """What a typed result came from: the server's answer, as printed."""
    return getattr(value, "raw", value)


async def timer_schedule(q: Queen, args: argparse.Namespace) -> Any:
    timer = q.timer(args.queue).key(args.key).delay(args.delay).payload(_payload_of(args), zstd=args.zstd)
    if args.partition:
        timer = timer.partition(args.partition)
    if args.txn:
        timer = timer.txn(args.txn)
    return _wire(await timer.schedule())


async def timer_cancel(q: Queen, args: argparse.Namespace) -> Any:
    timer = q.timer(args.queue).key(args.key)
    if args.txn:
        timer = timer.txn(args.txn)
    return _wire(await timer.cancel())


async def timer_peek(q: Queen, args: argparse.Namespace) -> Any:
    return _wire(await q.timer(args.queue).key(args.key).peek())


async def timer_list(q: Queen, args: argparse.Namespace) -> Any:
    timers = q.timer(args.queue)
    if args.all:
        rows = [_wire(row) async for row in timers.rows(page_size=args.limit, after=args.after)]
        return {"rows": [{k: v for k, v in row.items() if k != "found"} for row in rows], "truncated": False,
                "nextAfter": None}
    return _wire(await timers.list(limit=args.limit, after=args.after))


async def push(q: Queen, args: argparse.Namespace) -> Any:
    return _wire(await q.push(args.queue, _payload_of(args), partition=args.partition, txn=args.txn))


async def pop(q: Queen, args: argparse.Namespace) -> Any:
    messages = await q.pop(args.queue, group=args.group, partition=args.partition, batch=args.batch,
                           wait=args.wait, auto_ack=args.auto_ack)
    if args.ack:
        for message in messages:
            await message.ack()
    return {"leaseId": messages[0].lease_id if messages else None, "messages": [m.raw for m in messages]}


async def kv_get(q: Queen, args: argparse.Namespace) -> Any:
    return _wire(await q.kv(args.ns).get(args.key))


async def kv_put(q: Queen, args: argparse.Namespace) -> Any:
    return _wire(await q.kv(args.ns).put(args.key, args.value, ttl=args.ttl))


def run_client_command(args: argparse.Namespace) -> int:
    urls = args.url or urls_from_env()
    if not urls:
        print(f"queen-raft: give a node with --url or {URL_ENV}", file=sys.stderr)
        return EXIT_USAGE
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    call: Callable[[Queen, argparse.Namespace], Awaitable[Any]] = args.client_call

    async def run() -> Any:
        async with Queen(urls=urls, token=token, retry=RetryPolicy(budget_s=args.retry_budget)) as q:
            return await call(q, args)

    try:
        answer = asyncio.run(run())
    except ConnectionFailed as exc:
        _print_json(exc.wire_body(), sys.stderr)
        return EXIT_UNREACHABLE
    except QueenError as exc:
        _print_json(exc.wire_body(), sys.stderr)
        return EXIT_REFUSED
    except ValueError as exc:  # a duration or payload the SDK refuses before sending
        print(f"queen-raft: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _print_json(answer)
    return EXIT_OK


def _connection_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", action="append", default=None,
                        help=f"a node's URL, repeatable for failover (default: {URL_ENV}, comma-separated)")
    common.add_argument("--token", default=None, help=f"bearer token (default: {TOKEN_ENV})")
    common.add_argument("--retry-budget", type=float, default=CLI_RETRY_BUDGET_S, metavar="SECONDS",
                        help="give up retrying 503s and unreachable nodes after this long")
    return common


def _payload_options(parser: argparse.ArgumentParser, required: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--payload", type=_json_argument, help="a JSON value, e.g. '{\"orderId\": 9137}'")
    source.add_argument("--payload-file", help="raw bytes from a file")
    source.add_argument("--payload-b64", help="raw bytes, base64")


def _command(sub, name: str, call, common: argparse.ArgumentParser, help_text: str) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, parents=[common], help=help_text)
    parser.set_defaults(handler=run_client_command, client_call=call)
    return parser


def add_client_commands(sub: argparse._SubParsersAction) -> None:
    common = _connection_options()

    timer = sub.add_parser("timer", help="schedule, cancel, peek and list timers")
    timer_sub = timer.add_subparsers(dest="timer_command", required=True)
    schedule = _command(timer_sub, "schedule", timer_schedule, common, "schedule (or reschedule) a timer")
    schedule.add_argument("queue")
    schedule.add_argument("key")
    schedule.add_argument("--delay", required=True, type=_duration_argument, help="'250ms', '30s', '15m', '72h', '7d' or ms")
    _payload_options(schedule, required=True)
    schedule.add_argument("--partition")
    schedule.add_argument("--txn", help="the fired message's transactionId (minted when absent)")
    schedule.add_argument("--zstd", action="store_true", help="compress the payload (payloadZstd)")
    cancel = _command(timer_sub, "cancel", timer_cancel, common, "cancel a timer (DELETE: never refused by pause, rate or quota)")
    cancel.add_argument("queue")
    cancel.add_argument("key")
    cancel.add_argument("--txn", help="echoed in the answer: the transactionId to look for when it is absent")
    peek = _command(timer_sub, "peek", timer_peek, common, "one pending timer, payload included")
    peek.add_argument("queue")
    peek.add_argument("key")
    listing = _command(timer_sub, "list", timer_list, common, "a queue's pending timers, by key")
    listing.add_argument("queue")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--after", help="exclusive cursor: the nextAfter of the previous page")
    listing.add_argument("--all", action="store_true", help="follow nextAfter through every page")

    push_parser = _command(sub, "push", push, common, "push one message")
    push_parser.add_argument("queue")
    _payload_options(push_parser, required=True)
    push_parser.add_argument("--partition")
    push_parser.add_argument("--txn", help="the transactionId (minted when absent)")

    pop_parser = _command(sub, "pop", pop, common, "pop messages (takes a lease unless --auto-ack)")
    pop_parser.add_argument("queue")
    pop_parser.add_argument("--group", help="consumer group (default: queue mode)")
    pop_parser.add_argument("--partition")
    pop_parser.add_argument("--batch", type=int, default=1)
    pop_parser.add_argument("--wait", default=None, type=_duration_argument, help="long-poll up to this long, e.g. '5s'")
    settle = pop_parser.add_mutually_exclusive_group()
    settle.add_argument("--auto-ack", action="store_true", help="the server settles them at once, no lease")
    settle.add_argument("--ack", action="store_true", help="ack each message before printing them")

    kv = sub.add_parser("kv", help="read and write the replicated KV store")
    kv_sub = kv.add_subparsers(dest="kv_command", required=True)
    get = _command(kv_sub, "get", kv_get, common, "one key")
    get.add_argument("ns")
    get.add_argument("key")
    put = _command(kv_sub, "put", kv_put, common, "write one key")
    put.add_argument("ns")
    put.add_argument("key")
    put.add_argument("value", type=_json_argument, help="a JSON value")
    put.add_argument("--ttl", default=None, type=_duration_argument, help="'7d', '1h', ... (whole seconds); none: no expiry")
