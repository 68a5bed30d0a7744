"""The operator commands of `queen-raft`: dlq list|replay, admin pause|resume, usage, queue configure.

What an operator needs at a terminal during an incident, without writing Python. Output and exit
codes as in output.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from queen_raft.cli.output import UsageError, client_command, wire
from queen_raft.cli.progress import QuietBar, open_bar
from queen_raft.client import Queen

# The server clamps a DLQ page to 1..1000 rows (api/dlq.py DLQ_MAX_LIMIT); a filtered or --all
# listing asks for full pages, so it takes as few round trips as it can.
DLQ_SERVER_MAX_ROWS = 1000
# The server's own default page, kept when no --limit is given.
DLQ_DEFAULT_ROWS = 100

PAUSE_HELP = ("refuse new schedules of the token's tenant: POST /api/v1/timers (`timer schedule`) and any "
              "transaction that schedules answer 503 timers_disabled. Not refused: fires of pending timers, "
              "cancels (`timer cancel`, a transaction that only cancels), pushes, pops, acks, KV. Replicated: "
              "holds on every node and across restarts until `admin resume`. Admin tokens only.")


# --- dlq --------------------------------------------------------------------------------------

def _matches(row: dict, args: argparse.Namespace) -> bool:
    if args.group is not None and row.get("consumerGroup") != args.group:
        return False
    return args.partition is None or row.get("partition") == args.partition


async def dlq_list(q: Queen, args: argparse.Namespace) -> Any:
    """`{rows, truncated, nextAfter}`, in filing order from --after. --group and --partition filter
    here (the server filters by queue only), over as many of the server's pages as it takes to find
    --limit matching rows, or every one with --all. truncated: more matching rows follow; nextAfter
    (a dlqId) continues the listing with --after. With --all, the rows read so far show as progress
    on a terminal (progress.py)."""
    if args.all and args.limit is not None:
        raise UsageError("--all lists every row: give --all or --limit, not both")
    filtered = args.group is not None or args.partition is not None
    limit = None if args.all else (DLQ_DEFAULT_ROWS if args.limit is None else args.limit)
    # One row past the limit says whether more follow, as the server's own pages do.
    page_size = DLQ_SERVER_MAX_ROWS if filtered or limit is None else min(limit + 1, DLQ_SERVER_MAX_ROWS)
    matching: list[dict] = []
    bar = open_bar("dead letters read", unit=" rows") if args.all else QuietBar()
    try:
        async with contextlib.aclosing(q.dlq_rows(args.queue, page_size=page_size, after=args.after)) as rows:
            async for entry in rows:
                bar.update(1)
                row = wire(entry)
                if _matches(row, args):
                    matching.append(row)
                    if limit is not None and len(matching) > limit:
                        break
    finally:
        bar.close()
    truncated = limit is not None and len(matching) > limit
    shown = matching[:limit] if truncated else matching
    return {"rows": shown, "truncated": truncated, "nextAfter": shown[-1]["dlqId"] if truncated else None}


async def dlq_replay(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.replay(args.dlq_id))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# --- admin and usage ----------------------------------------------------------------------------

async def admin_pause(q: Queen, args: argparse.Namespace) -> Any:
    # The route's answer, not the SDK's bool (pause_scheduling): it names the tenant the token paused.
    return (await q.transport.request("POST", "/api/v1/admin/timers/pause")).body


async def admin_resume(q: Queen, args: argparse.Namespace) -> Any:
    return (await q.transport.request("POST", "/api/v1/admin/timers/resume")).body


async def usage(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.usage())


# --- queue configure ----------------------------------------------------------------------------

def queue_options(settings: list[str]) -> dict:
    """`--set name=value` pairs as the options object. A value is read as JSON (every option of
    docs/spec.md section 3 is an integer or a boolean); text that is not JSON is sent as a string, so the server's
    400 names the option and what it expects."""
    options: dict[str, Any] = {}
    for setting in settings:
        name, sep, text = setting.partition("=")
        if not sep or not name:
            raise UsageError(f"--set {setting!r}: write it as name=value, e.g. --set retryLimit=5")
        if name in options:
            raise UsageError(f"--set {name} is given twice")
        try:
            options[name] = json.loads(text)
        except ValueError:
            options[name] = text
    return options


async def queue_configure(q: Queen, args: argparse.Namespace) -> Any:
    if not args.set and not args.replace:
        raise UsageError("give at least one --set name=value (or --replace to reset every option to its default)")
    return wire(await q.configure(args.queue, queue_options(args.set or []), mode="replace" if args.replace else "merge"))


# --- registration ------------------------------------------------------------------------------

def add_operator_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    dlq = sub.add_parser("dlq", help="list and replay dead letters")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    listing = client_command(dlq_sub, "list", dlq_list, common, "dead-letter rows, payload as stored (base64)",
                             description="Dead-letter rows in filing order, payload as stored: {rows, truncated, "
                             "nextAfter}; continue a truncated listing with --after NEXT_AFTER. A timer that "
                             "failed permanently has consumerGroup __timer__ and offset -1.")
    listing.add_argument("queue", nargs="?", default=None, help="one queue (default: every queue)")
    listing.add_argument("--group", help="only rows of this consumer group (__timer__: failed timers)")
    listing.add_argument("--partition", help="only rows of this partition")
    listing.add_argument("--limit", type=_positive_int, default=None,
                         help=f"at most this many rows (default {DLQ_DEFAULT_ROWS}); with --group or --partition, "
                              "this many matching rows, read over as many pages as it takes")
    listing.add_argument("--after", metavar="DLQ_ID", default=None,
                         help="start after this row: the nextAfter of the previous listing")
    listing.add_argument("--all", action="store_true",
                         help="every (matching) row, page after page, instead of --limit rows (the rows read so "
                              "far show on stderr when it is a terminal)")
    replay = client_command(dlq_sub, "replay", dlq_replay, common, "push a dead letter's message again",
                            description="Pushes the row's payload again under a new messageId (also its "
                            "transactionId) and removes the row. A timer's row (__timer__) is refused: 409 "
                            "dlq_replay_refused, exit 1.")
    replay.add_argument("dlq_id", metavar="DLQ_ID", help="the row's dlqId, from `dlq list`")

    admin = sub.add_parser("admin", help="operator switches of the token's tenant (admin tokens)")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True)
    client_command(admin_sub, "pause", admin_pause, common, "refuse new timer schedules of the tenant; cancels pass",
                   description=PAUSE_HELP)
    client_command(admin_sub, "resume", admin_resume, common, "accept timer schedules again")

    client_command(sub, "usage", usage, common, "the tenant's counters (admin tokens)",
                   description="billedMessages, pushedMessages, pendingTimers, fired by result and "
                   "schedulingPaused: replicated counters, the same on every node.")

    queue = sub.add_parser("queue", help="a queue's options")
    queue_sub = queue.add_subparsers(dest="queue_command", required=True)
    configure = client_command(queue_sub, "configure", queue_configure, common,
                               "set a queue's options; prints the options in force",
                               description="Options (docs/spec.md section 3): leaseTime (s), retryLimit, "
                               "deadLetterQueue (bool), dedupWindowSeconds, delayedProcessing (s), maxPayloadBytes, "
                               "maxSize (messages), retentionSeconds, encryptionEnabled (bool). Creates the queue "
                               "when missing. A bad option or value exits 1 with the server's 400 body.")
    configure.add_argument("queue")
    configure.add_argument("--set", action="append", metavar="NAME=VALUE",
                           help="one option, repeatable; VALUE is JSON: 30, true")
    configure.add_argument("--replace", action="store_true",
                           help="every option not --set goes back to its default (default: merge)")
