"""`python -m jepsen run|campaign|recheck`: see jepsen/README.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jepsen.nemesis import NEMESES
from jepsen.run import (CAMPAIGN_DURATION_S, STORE, RunOptions, print_summary, recheck, render_campaign,
                        run_campaign, run_once)
from jepsen.workloads import WORKLOAD_NAMES


def _companions(text: str) -> list[str]:
    return [] if text == "none" else [name.strip() for name in text.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jepsen", description="fault runs against real nodes")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one run: a workload under a nemesis")
    run.add_argument("--workload", choices=WORKLOAD_NAMES, default="timers")
    run.add_argument("--nemesis", choices=sorted(NEMESES), default="mixed")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--duration", type=float, default=60.0, help="seconds of operations before the final phase")
    run.add_argument("--rate", type=float, default=20.0, help="client operations per second")
    run.add_argument("--concurrency", type=int, default=6, help="logical client processes")
    run.add_argument("--store", type=Path, default=STORE)
    run.add_argument("--preload", type=int, default=0,
                     help="timers to schedule far ahead before the run, read back at the end (jepsen/preload.py)")
    run.add_argument("--with", dest="companions", type=_companions, default=None,
                     help="workloads to run beside it, comma-separated, or `none` (default: the other tenant's, "
                          "see jepsen/README.md)")
    campaign = commands.add_parser("campaign", help="every workload under each nemesis, several seeds")
    campaign.add_argument("--duration", type=float, default=CAMPAIGN_DURATION_S)
    campaign.add_argument("--rate", type=float, default=20.0)
    campaign.add_argument("--store", type=Path, default=STORE)
    again = commands.add_parser("recheck", help="judge stored runs again from their files")
    again.add_argument("run_dirs", type=Path, nargs="+")
    again.add_argument("--table", type=Path, default=None, help="also write a campaign table of these runs here")
    args = parser.parse_args(argv)
    if args.command == "run":
        try:
            options = RunOptions(args.workload, args.nemesis, args.seed, args.duration, args.rate,
                                 args.concurrency, args.store, args.preload, args.companions)
            options.workloads  # refuses a bad combination before anything starts
        except ValueError as error:
            parser.error(str(error))
        code, summary = run_once(options)
        print_summary(summary)
        print(f"report: {args.store / summary['run'] / 'report.md'}")
        return code
    if args.command == "campaign":
        return run_campaign(args.duration, args.rate, args.store)
    worst, summaries = 0, []
    for run_dir in args.run_dirs:
        code, summary = recheck(run_dir)
        print_summary(summary)
        worst, summaries = max(worst, code), summaries + [summary]
    if args.table is not None:
        args.table.write_text(render_campaign(summaries), encoding="utf-8")
        print(f"campaign table: {args.table}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
