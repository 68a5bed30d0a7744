"""`python -m bench <scenario|all> [--quick] [--systems ...] [--profile]`."""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from bench.report import SCENARIO_ORDER, markdown_table, repo_relative, write_result, write_table
from bench.systems import SYSTEM_NAMES

# A scenario module per figure family, named by what it measures.
SCENARIO_MODULES = {name: f"bench.{name}" for name in SCENARIO_ORDER}


def system_names(text: str) -> list[str]:
    """`queen-raft,etcd` or `etcd`: the names, each one the suite knows."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in SYSTEM_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown system {', '.join(unknown) or text!r}; choose from {', '.join(SYSTEM_NAMES)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("scenario", choices=[*SCENARIO_ORDER, "all"])
    parser.add_argument("--quick", action="store_true", help="reduced sizes for development (seconds, not minutes)")
    parser.add_argument("--systems", nargs="+", type=system_names, default=[list(SYSTEM_NAMES)],
                        help="which systems to run, space- or comma-separated (default: ours and every peer): "
                        + ", ".join(SYSTEM_NAMES))
    parser.add_argument("--profile", action="store_true",
                        help="sample the leader node with py-spy during the measured phases (scenarios 1-3)")
    args = parser.parse_args(argv)
    args.systems = list(dict.fromkeys(name for names in args.systems for name in names))
    scenarios = SCENARIO_ORDER if args.scenario == "all" else (args.scenario,)
    failed = []
    for scenario in scenarios:
        module = importlib.import_module(SCENARIO_MODULES[scenario])
        started = time.monotonic()
        print(f"== {scenario}{' (quick)' if args.quick else ''}: {', '.join(args.systems)}", flush=True)
        try:
            result = module.run(tuple(args.systems), args.quick, args.profile)
        except Exception as exc:  # one broken scenario must not hide the others' figures
            import traceback

            traceback.print_exc()
            failed.append(f"{scenario}: {exc!r}")
            continue
        path = write_result(result)
        print(markdown_table([result.as_dict()]))
        print(f"   {scenario} took {time.monotonic() - started:.0f} s; written {repo_relative(path)}", flush=True)
    table = write_table(args.quick)
    print(f"table: {repo_relative(table)}")
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
