"""`queen-raft timer schedule|cancel|peek|list`: the timer routes from a terminal.

`timer schedule` takes one timer from its options, or many with `--file` (timer_file.py). Output
and exit codes as in output.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from queen_raft.cli.messages import payload_of, payload_options
from queen_raft.cli.output import client_command, duration_argument, wire
from queen_raft.cli.timer_file import schedule_file
from queen_raft.client import Queen


class CheckedParser(argparse.ArgumentParser):
    """A parser that runs the namespace's `check_args(namespace)` after parsing: a combination of
    options argparse cannot express is refused like any bad command line (usage, exit 2)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = super().parse_known_args(args, namespace)
        check = getattr(parsed, "check_args", None)
        problem = check(parsed) if check is not None else None
        if problem:
            self.error(problem)
        return parsed, extras


def schedule_args_problem(args: argparse.Namespace) -> str | None:
    """One timer needs QUEUE, KEY, --delay and a payload; --file takes all but QUEUE from its lines."""
    if args.file is not None:
        given = [name for name, value in (("KEY", args.key), ("--delay", args.delay), ("--payload", args.payload),
                                          ("--payload-file", args.payload_file), ("--payload-b64", args.payload_b64),
                                          ("--partition", args.partition), ("--txn", args.txn), ("--zstd", args.zstd))
                 if value not in (None, False)]
        return f"--file takes each timer from its lines: not with {', '.join(given)}" if given else None
    missing = [name for name, value in (("QUEUE", args.queue), ("KEY", args.key), ("--delay", args.delay)) if value is None]
    if args.payload is None and args.payload_file is None and args.payload_b64 is None:
        missing.append("one of --payload, --payload-file, --payload-b64")
    return f"timer schedule needs {', '.join(missing)} (or --file, one timer a line)" if missing else None


async def timer_schedule(q: Queen, args: argparse.Namespace) -> Any:
    if args.file is not None:
        return await schedule_file(q, args)
    timer = q.timer(args.queue).key(args.key).delay(args.delay).payload(payload_of(args), zstd=args.zstd)
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
        rows = [wire(row) async for row in timers.rows(page_size=args.limit, after=args.after, prefix=args.prefix)]
        return {"rows": [{k: v for k, v in row.items() if k != "found"} for row in rows], "truncated": False,
                "nextAfter": None}
    return wire(await timers.list(limit=args.limit, after=args.after, prefix=args.prefix))


def add_timer_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    timer = sub.add_parser("timer", help="schedule, cancel, peek and list timers")
    timer_sub = timer.add_subparsers(dest="timer_command", required=True, parser_class=CheckedParser)
    schedule = client_command(timer_sub, "schedule", timer_schedule, common,
                              "schedule (or reschedule) a timer, or one a line of a file with --file")
    schedule.add_argument("queue", nargs="?", help="with --file: the queue of the lines that name none")
    schedule.add_argument("key", nargs="?")
    schedule.add_argument("--delay", type=duration_argument, help="'250ms', '30s', '15m', '72h', '7d' (or 0)")
    schedule.add_argument("--file", metavar="ROWS_JSONL",
                          help="one timer a line, as JSON: {queue, timerKey, delay|at, payload|payloadB64, partition?, "
                               "txn?, zstd?}; sent in calls of 256 after every line is checked; prints a summary; "
                               "progress on stderr when it is a terminal; - reads stdin")
    payload_options(schedule, required=False)
    schedule.set_defaults(check_args=schedule_args_problem)
    schedule.add_argument("--partition")
    schedule.add_argument("--txn", help="the fired message's transactionId (minted when absent)")
    schedule.add_argument("--zstd", action="store_true", help="compress the payload (payloadZstd)")
    cancel = client_command(timer_sub, "cancel", timer_cancel, common,
                            "cancel a timer (DELETE: never refused by pause, rate or quota); after its fire, "
                            "prints status fired with the message's partition, offset and messageId")
    cancel.add_argument("queue")
    cancel.add_argument("key")
    cancel.add_argument("--txn", help="echoed in the answer: the transactionId to look for when it is absent")
    peek = client_command(timer_sub, "peek", timer_peek, common,
                          "one pending timer, payload included; after its fire, where its message went")
    peek.add_argument("queue")
    peek.add_argument("key")
    listing = client_command(timer_sub, "list", timer_list, common, "a queue's pending timers, by key")
    listing.add_argument("queue")
    listing.add_argument("--limit", type=int)
    listing.add_argument("--after", help="exclusive cursor: the nextAfter of the previous page")
    listing.add_argument("--prefix", help="only the timers whose key starts with this")
    listing.add_argument("--all", action="store_true", help="follow nextAfter through every page")
