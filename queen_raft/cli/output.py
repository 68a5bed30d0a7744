"""What every client command of `queen-raft` shares: connection options, argument types, and the
runner that turns an SDK call into JSON on stdout and an exit code.

Each command prints the server's JSON answer on stdout and exits EXIT_OK; a refusal prints the
error body (`{"error", "message"}`, or a transaction's `{"success": false, "reason", ...}`) on
stderr and exits EXIT_REFUSED; a bad command line, a bad file or a value the SDK refuses before
sending exits EXIT_USAGE; a cluster nobody answers for exits EXIT_UNREACHABLE. Nodes come from
`--url` (repeatable) or QUEEN_URL (comma-separated), the token from `--token` or QUEEN_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, Awaitable, Callable

from queen_raft.cli.table import render
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


class UsageError(ValueError):
    """A command line that parses but cannot be sent (a missing file, two values for one option)."""


def installed_version() -> str:
    """The installed distribution's version (pyproject.toml's), or "unknown" when run from a
    source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("queen-raft")
    except PackageNotFoundError:
        return "unknown"


def print_json(value: Any, stream=None) -> None:
    print(json.dumps(value, ensure_ascii=False), file=stream or sys.stdout, flush=True)


def json_argument(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}); quote a string as '\"text\"'") from None


def duration_argument(text: str) -> Any:
    """'15m', '7d', '250ms'; bare digits other than 0 are refused, as in the SDK (no unit guessed)."""
    value: Any = int(text) if text.lstrip("-").isdigit() else text
    try:
        duration_ms(value)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def wire(value: Any) -> Any:
    """What a typed result came from: the server's answer, as printed."""
    return getattr(value, "raw", value)


ClientCall = Callable[[Queen, argparse.Namespace], Awaitable[Any]]


def run_client_command(args: argparse.Namespace) -> int:
    urls = args.url or urls_from_env()
    if not urls:
        print(f"queen-raft: give a node with --url or {URL_ENV}", file=sys.stderr)
        return EXIT_USAGE
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    call: ClientCall = args.client_call

    async def run() -> Any:
        async with Queen(urls=urls, token=token, retry=RetryPolicy(budget_s=args.retry_budget), cafile=args.cacert) as q:
            return await call(q, args)

    try:
        answer = asyncio.run(run())
    except ConnectionFailed as exc:
        print_json(exc.wire_body(), sys.stderr)
        return EXIT_UNREACHABLE
    except QueenError as exc:
        print_json(exc.wire_body(), sys.stderr)
        return EXIT_REFUSED
    except ValueError as exc:  # a duration, payload, file or option the CLI or the SDK refuses before sending
        print(f"queen-raft: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print_answer(answer, args.output)
    return EXIT_OK


def print_answer(answer: Any, output: str | None) -> None:
    """JSON (the server's answer as it is) unless a table was asked for, or stdout is a terminal
    and nothing was asked."""
    if output == "table" or (output is None and sys.stdout.isatty()):
        print(render(answer), flush=True)
    else:
        print_json(answer)


def connection_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", action="append", default=None,
                        help=f"a node's URL, repeatable for failover (default: {URL_ENV}, comma-separated)")
    common.add_argument("--token", default=None, help=f"bearer token (default: {TOKEN_ENV})")
    common.add_argument("--cacert", default=None, metavar="FILE",
                        help="PEM file of the CA that signed the nodes' certificates, for https:// URLs "
                             "(default: QUEEN_CACERT, else the system's trust store)")
    common.add_argument("--retry-budget", type=float, default=CLI_RETRY_BUDGET_S, metavar="SECONDS",
                        help="give up retrying 503s and unreachable nodes after this long")
    common.add_argument("--output", "-o", choices=("json", "table"), default=None,
                        help="json (the server's answer; the default when piped) or table (the default on a "
                             "terminal: columns, times as ISO 8601 with the delay from now)")
    return common


def client_command(sub, name: str, call: ClientCall, common: argparse.ArgumentParser, help_text: str,
                   description: str | None = None) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, parents=[common], help=help_text, description=description or help_text)
    parser.set_defaults(handler=run_client_command, client_call=call)
    return parser
