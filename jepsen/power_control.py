"""`python -m jepsen.power_control` (`make jepsen-power-control`): the control for the power nemesis.

The campaign's power runs (timers beside queue + txn under `power`, seeds 1 and 2) again, with the nodes
run with QUEEN_RAFT_FSYNC=off: nothing is fsynced, so a power loss takes whatever the nodes wrote
since they started, and the checkers must find acknowledged writes lost. If they do not, the nemesis
does not bite and the passes of the `group` runs prove nothing. Exit 0 when every workload lost
acknowledged writes in at least one of its runs, 1 otherwise. Not part of the default campaign.
"""

from __future__ import annotations

import os
import sys
import time

from jepsen.power import POWER_CAMPAIGN
from jepsen.run import CAMPAIGN_DURATION_S, STORE, RunOptions, print_summary, render_campaign, run_once

# The properties that report an acknowledged write missing at the end, by workload.
LOSS_PROPERTIES = {
    "timers": ("no_lost_timers",),
    "queue": ("no_lost_acknowledged_pushes",),
    "txn": ("no_lost_acknowledged_pushes", "transaction_atomicity", "kv_counter_serializable"),
}


def lost_counts(summary: dict) -> dict[str, int]:
    """Violations of each loss property that failed in this run, as `<workload>/<property>` (a run
    judges each of its workloads under its own prefix)."""
    properties = summary["properties"]
    names = [f"{workload}/{name}" for workload, loss in LOSS_PROPERTIES.items() for name in loss]
    return {name: properties[name].get("violations") or 0 for name in names
            if properties.get(name, {}).get("valid") is False}


def main() -> int:
    os.environ["QUEEN_RAFT_FSYNC"] = "off"  # the nodes inherit the harness's environment
    rows, lines = [], []
    for workload, nemesis, seed, preloaded in POWER_CAMPAIGN:
        _, summary = run_once(RunOptions(workload, nemesis, seed, CAMPAIGN_DURATION_S, preload=preloaded))
        print_summary(summary)
        rows.append(summary)
        lost = lost_counts(summary)
        lines.append(f"| {summary['run']} | {summary['operation_count']} | {sum(summary['faults'].values())} | "
                     + (", ".join(f"{name} {count}" for name, count in lost.items()) or "none found") + " |")
    bitten = {name.split("/", 1)[0] for row in rows for name in lost_counts(row)}
    verdict = (f"acknowledged writes lost in {sum(1 for row in rows if lost_counts(row))} of {len(rows)} runs; "
               f"workloads bitten: {', '.join(sorted(bitten)) or 'none'}")
    path = STORE / f"power-control-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.md"
    STORE.mkdir(parents=True, exist_ok=True)
    path.write_text(render_campaign(rows) + "\n# Losses (QUEEN_RAFT_FSYNC=off)\n\n| run | ops | faults | lost |\n"
                    "| --- | --- | --- | --- |\n" + "\n".join(lines) + f"\n\n{verdict}\n", encoding="utf-8")
    print(f"control: {verdict}\ntable: {path}")
    return 0 if bitten == set(LOSS_PROPERTIES) else 1


if __name__ == "__main__":
    sys.exit(main())
