"""What a run leaves behind: results.json for machines, report.md and timeline.png for people.

The PNG needs matplotlib, which is not a project dependency yet; without it the report says so
instead of drawing, and everything else is written the same.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from jepsen.checkers import overall_valid
from jepsen.history import FAIL, INFO, INVOKE, NEMESIS_PROCESS, OK, Event, FaultWindow, Operation

# Consumers' process ids start here (run.py); below it, client ids = slot + k * concurrency.
CONSUMER_PROCESS_BASE = 10_000
# Counterexamples printed per failing property in report.md (results.json keeps more).
REPORT_COUNTEREXAMPLES = 3


def verdict_word(valid: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "unknown"}[valid]


def find_property(properties: dict, name: str) -> dict:
    """The first property called `name` (`<workload>/<name>`, or `name` in a run judged before a
    run held several workloads); {} when none is."""
    for key, prop in properties.items():
        if key == name or key.endswith("/" + name):
            return prop
    return {}


def workload_properties(properties: dict, workload: str) -> dict:
    """One workload's properties, without the `<workload>/` prefix."""
    prefix = workload + "/"
    return {key[len(prefix):]: prop for key, prop in properties.items() if key.startswith(prefix)}


def write_results(run_dir: Path, summary: dict) -> Path:
    path = run_dir / "results.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def point_latest(store: Path, run_dir: Path) -> None:
    """jepsen/store/latest -> the run directory (relative, so the store can move)."""
    latest = store / "latest"
    temporary = store / f".latest.{os.getpid()}"
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    temporary.symlink_to(run_dir.name)
    os.replace(temporary, latest)


def operation_table(operations: list[Operation]) -> dict[str, dict[str, int]]:
    """Counts by type of each `<workload>/<f>` (`<f>` in a history whose operations name no workload),
    with ` via <route>` for the operations a workload sends through another route (a transaction)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for op in operations:
        if op.process == NEMESIS_PROCESS:
            continue
        via = op.value.get("via") if isinstance(op.value, dict) else None
        name = (f"{op.workload}/{op.f}" if op.workload else op.f) + (f" via {via}" if via else "")
        table[name][op.type] += 1
    return {f: {t: counts.get(t, 0) for t in (OK, FAIL, INFO)} for f, counts in sorted(table.items())}


# The final phase's own steps: recorded as windows (they disturb the cluster) but not counted as
# injected faults.
FINAL_PHASE_STEPS = ("heal-all", "restart-all")


def fault_counts(events: list[Event]) -> dict[str, int]:
    counts: Counter = Counter()
    for event in events:
        if event.process == NEMESIS_PROCESS and event.type == INVOKE and isinstance(event.value, dict) \
                and event.value.get("phase") == "start" and event.value.get("fault") not in FINAL_PHASE_STEPS:
            counts[event.value.get("fault")] += 1
    return dict(sorted(counts.items()))


def _figure(value: Any) -> str:
    return "-" if value is None else (f"{value:.0f}" if isinstance(value, (int, float)) else str(value))


def _is_tally(value: Any) -> bool:
    """A small flat dict of counts (e.g. transactions by outcome, refusals by reason): worth a cell."""
    return isinstance(value, dict) and bool(value) and all(type(v) is int for v in value.values())


def _property_note(name: str, prop: dict) -> str:
    keep = {k: v for k, v in prop.items()
            if k not in ("valid", "violations", "counterexamples", "fire_lag_ms", "visible_lag_ms", "note", "judged")
            and (not isinstance(v, (list, dict)) or _is_tally(v))}
    return ", ".join(f"{k}=" + (" ".join(f"{a}:{b}" for a, b in v.items()) if isinstance(v, dict) else f"{v}")
                     for k, v in keep.items())


def render_markdown(summary: dict, png_note: str) -> str:
    lines = [
        f"# Fault run {summary['run']}",
        "",
        f"- workload **{summary['workload']}**, nemesis **{summary['nemesis']}**, seed {summary['seed']}, "
        f"duration {summary['duration_s']} s, rate {summary['rate']}/s per workload",
        "- workloads (tenant): " + ", ".join(f"{name} ({facts.get('tenant')}): {verdict_word(facts.get('valid'))}"
                                             for name, facts in summary.get("workloads", {}).items()),
        f"- verdict: **{verdict_word(summary['valid'])}**",
        f"- command: `{summary['command']}`",
        "",
        "## Properties",
        "",
        "| property | verdict | violations | figures |",
        "| --- | --- | --- | --- |",
    ]
    for name, prop in summary["properties"].items():
        judged = prop.get("judged", True)
        verdict = verdict_word(prop.get("valid")) if judged else "reported"
        lines.append(f"| {name} | {verdict} | {prop.get('violations', '-')} | {_property_note(name, prop)} |")
    lateness = find_property(summary["properties"], "lateness")
    if lateness:
        lines += ["", "## Lateness (ms)", "",
                  "fire lag = the fire entry's createdAt - deliverAt (group clock); visible lag = first "
                  "consumer sight - deliverAt (harness clock, includes the consumer's poll).", "",
                  "| measure | period | count | p50 | p99 | max |", "| --- | --- | --- | --- | --- | --- |"]
        for measure in ("fire_lag_ms", "visible_lag_ms"):
            for period in ("quiet", "fault"):
                figures = lateness[measure][period]
                lines.append(f"| {measure} | {period} | {figures['count']} | {_figure(figures['p50'])} | "
                             f"{_figure(figures['p99'])} | {_figure(figures['max'])} |")
    floor = find_property(summary["properties"], "floor_not_before_deliverAt")
    if floor and floor.get("max_injected_skew_ms"):
        lines += ["", "## Clock skew", "",
                  f"- largest injected skew: {floor['max_injected_skew_ms']} ms "
                  f"(largest forward: {floor['max_forward_skew_ms']} ms)",
                  f"- early fires under skew: {floor['early_fires_under_skew']} "
                  f"(each within the forward skew then in force: {floor['early_within_forward_skew']})",
                  f"- largest: `{json.dumps(floor['largest_early_fire_under_skew'])}`"]
    lines += ["", "## Operations", "", "| f | ok | fail | info |", "| --- | --- | --- | --- |"]
    for f, counts in summary["operations"].items():
        lines.append(f"| {f} | {counts[OK]} | {counts[FAIL]} | {counts[INFO]} |")
    lines += ["", "## Faults injected", ""]
    if summary["faults"]:
        lines += ["| fault | count |", "| --- | --- |"]
        lines += [f"| {fault} | {count} |" for fault, count in summary["faults"].items()]
    else:
        lines.append("none")
    failing = {name: prop for name, prop in summary["properties"].items() if prop.get("valid") is False}
    if failing:
        lines += ["", "## Counterexamples", ""]
        for name, prop in failing.items():
            lines += [f"### {name}", "", "```json"]
            lines += [json.dumps(example, default=str)[:2000] for example in
                      prop.get("counterexamples", [])[:REPORT_COUNTEREXAMPLES]]
            lines += ["```", ""]
    lines += ["", "## Notes", ""]
    lines += [f"- {note}" for note in summary.get("notes", [])] or ["- none"]
    lines += [f"- {png_note}", "", "Files: history.jsonl, results.json, plan.json, cluster.toml, nodes/*.log."]
    return "\n".join(lines) + "\n"


def draw_timeline(path: Path, operations: list[Operation], windows: list[FaultWindow], fires: list[tuple[int, int]],
                  started_wall_ms: int, lane_stride: int) -> str:
    """Operations by process over time and fire lag, fault windows shaded. Returns a note."""
    try:
        import matplotlib
    except ImportError:
        return ("timeline.png not drawn: matplotlib is not installed (add `matplotlib>=3.8` to the "
                "project's test dependencies)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(14, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    colours = {OK: "tab:green", FAIL: "tab:red", INFO: "tab:orange"}
    lanes: dict[Any, int] = {}
    for op in operations:
        if op.process == NEMESIS_PROCESS:
            continue
        # A process that got `info` continues under a new id (+ stride); keep it on its lane.
        slot = op.process % lane_stride if isinstance(op.process, int) and op.process < CONSUMER_PROCESS_BASE \
            else op.process
        lane = lanes.setdefault(slot, len(lanes))
        start = (op.invoke_wall_ms - started_wall_ms) / 1000.0
        end = ((op.complete_wall_ms or op.invoke_wall_ms) - started_wall_ms) / 1000.0
        top.plot([start, max(end, start + 0.01)], [lane, lane], color=colours.get(op.type, "grey"), linewidth=2)
    top.set_ylabel("client / consumer")
    top.set_title("operations (green ok, red fail, orange info); shaded: faults")
    if fires:
        bottom.scatter([(t - started_wall_ms) / 1000.0 for t, _ in fires], [lag for _, lag in fires], s=6)
    bottom.set_ylabel("fire lag (ms)")
    bottom.set_xlabel("seconds since start")
    for window in windows:
        start = (window.start_wall_ms - started_wall_ms) / 1000.0
        end = ((window.end_wall_ms or window.start_wall_ms) - started_wall_ms) / 1000.0
        for axis in (top, bottom):
            axis.axvspan(start, max(end, start + 0.05), color="tab:red", alpha=0.12)
        top.text(start, top.get_ylim()[1], window.fault, rotation=90, fontsize=7, va="top")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return "timeline.png drawn with matplotlib"


def summarize(run: str, plan: dict, command: str, properties: dict, operations: list[Operation],
              events: list[Event], notes: list[str], tenants: dict[str, str] | None = None) -> dict:
    """results.json. `tenants`: workload -> its tenant, in the run's order."""
    tenants = tenants or {plan["workload"]: None}
    workloads = {
        name: {"tenant": tenant, "valid": overall_valid(workload_properties(properties, name)),
               "operation_count": sum(1 for op in operations if op.workload == name)}
        for name, tenant in tenants.items()
    }
    return {
        "run": run,
        "workload": plan["workload"],
        "companions": plan.get("companions", []),
        "workloads": workloads,
        "nemesis": plan["nemesis"],
        "seed": plan["seed"],
        "duration_s": plan["duration_s"],
        "rate": plan["rate"],
        "command": command,
        "valid": overall_valid(properties),
        "operations": operation_table(operations),
        "operation_count": sum(1 for op in operations if op.process != NEMESIS_PROCESS),
        "faults": fault_counts(events),
        "properties": properties,
        "notes": notes,
    }


def render_campaign(rows: list[dict]) -> str:
    """The campaign table: one line per workload of each run (a run holds several, in two tenants)."""
    lines = ["# Fault campaign", "",
             "| run | workload (tenant) | ops | faults | verdict | properties passed | not passed "
             "| fire lag quiet p50/p99/max | fire lag fault p50/p99/max |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        workloads = row.get("workloads") or {row["workload"]: {"operation_count": row["operation_count"]}}
        for name, facts in workloads.items():
            props = workload_properties(row["properties"], name) or (row["properties"] if len(workloads) == 1 else {})
            judged = {n: p for n, p in props.items() if p.get("judged", True)}
            passed = sum(1 for p in judged.values() if p.get("valid") is True)
            not_passed = ", ".join(f"{n} {verdict_word(p.get('valid'))}" for n, p in judged.items()
                                   if p.get("valid") is not True) or "-"
            lag = (props.get("lateness") or {}).get("fire_lag_ms", {})

            def triple(period: str) -> str:
                figures = lag.get(period) or {}
                return "/".join("-" if figures.get(k) is None else str(figures[k]) for k in ("p50", "p99", "max"))

            tenant = facts.get("tenant") or "-"
            lines.append(f"| {row['run']} | {name} ({tenant}) | {facts.get('operation_count', '-')} "
                         f"| {sum(row['faults'].values())} | {verdict_word(overall_valid(props))} "
                         f"| {passed}/{len(judged)} | {not_passed} | {triple('quiet')} | {triple('fault')} |")
    return "\n".join(lines) + "\n"
