"""One run end to end, and a campaign of runs.

A run: write the plan, boot the cluster, run clients, consumers and nemesis for the duration, run
the final phase, check, write the report. Exit status 0 when every judged property holds, 1 when
one fails, 2 when the run could not be judged (cluster never came up, a property unknown).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from jepsen import preload
from jepsen.checkers import overall_valid
from jepsen.client import HistoryClient, NodeClient, open_session
from jepsen.cluster import TENANT, TOKEN_ADMIN, TOKEN_READ_WRITE, Cluster, ClusterSpec
from jepsen.generator import DEFAULT_CONCURRENCY, RunPlan, final_phase, make_plan, run_clients
from jepsen.history import HistoryWriter, fault_windows, pair_operations
from jepsen.nemesis import SNAPSHOT_FAULTS, Nemesis
from jepsen.power import MOUNT_DIR_NAME, POWER_CAMPAIGN, PowerDisks, check_starts_after_power_loss, needs_lazy_fs
from jepsen.report import (CONSUMER_PROCESS_BASE, draw_timeline, point_latest, render_markdown, summarize, verdict_word,
                           write_results)
from jepsen.snapshots import snapshot_fault_notes
from jepsen.workloads import make_workload
from jepsen.workloads.messages import Consumer

STORE = Path(__file__).resolve().parent / "store"
# The cluster must elect a leader within this at boot, or the run is abandoned as unjudgeable.
BOOT_TIMEOUT_S = 60.0
# Connections the harness may hold open at once (clients + long-polling consumers + final reads).
HTTP_CONNECTION_LIMIT = 64
# Settings of every harness cluster. A snapshot starts once the log holds this many entries past the
# last one (the default, 2000, is a minute or more of a run's load): a run then sees several
# snapshots, and the snapshot nemeses find writers running within seconds. The pending-timer quota
# is set far above any preload, so a default quota can never refuse one.
HARNESS_SETTINGS = {"log_compaction_min_entries": 500, "timers_max_pending": 5_000_000}

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2


@dataclass
class RunOptions:
    workload: str = "timers"
    nemesis: str = "mixed"
    seed: int = 1
    duration_s: float = 60.0
    rate: float = 20.0
    concurrency: int = DEFAULT_CONCURRENCY
    store: Path = STORE
    preload: int = 0  # timers scheduled far ahead before the run (jepsen/preload.py)


def exit_code(valid: bool | None) -> int:
    return {True: EXIT_VALID, False: EXIT_INVALID, None: EXIT_UNKNOWN}[valid]


def run_name(options: RunOptions) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{options.workload}-{options.nemesis}-s{options.seed}"


def command_line(options: RunOptions) -> str:
    return shlex.join([
        "python", "-m", "jepsen", "run", "--workload", options.workload, "--nemesis", options.nemesis,
        "--seed", str(options.seed), "--duration", f"{options.duration_s:g}", "--rate", f"{options.rate:g}",
        "--concurrency", str(options.concurrency),
    ] + (["--preload", str(options.preload)] if options.preload else []))


async def _drive(options: RunOptions, plan: RunPlan, cluster: Cluster, history: HistoryWriter,
                 notes: list[str]):
    workload = make_workload(options.workload)
    nemesis = Nemesis(cluster, history)
    urls = {node.id: node.base_url for node in cluster.nodes.values()}
    async with open_session(HTTP_CONNECTION_LIMIT) as session:
        client = HistoryClient(session, history, urls, TOKEN_READ_WRITE)
        notes += await workload.setup(client, "setup")
        loaded = None
        if options.preload:
            loaded = await preload.preload(client, options.preload, cluster.leader)
            notes.append(f"preload: {loaded.acknowledged} of {options.preload} timers acknowledged in "
                         f"{loaded.seconds:.1f} s ({loaded.calls} calls of up to {preload.OPS_PER_CALL})")
        stop = asyncio.Event()
        consumers: list[Consumer] = []
        stride = 1000  # consumer process ids live above the clients' and never collide
        for spec in workload.consumers():
            for index in range(spec.count):
                consumers.append(Consumer(client, spec.queue, spec.group,
                                          first_process=CONSUMER_PROCESS_BASE + len(consumers),
                                          process_stride=stride, node_index=len(consumers)))
        consumer_tasks = [asyncio.create_task(consumer.run()) for consumer in consumers]
        loop = asyncio.get_running_loop()
        started = loop.time()
        nemesis_task = asyncio.create_task(nemesis.run(plan.faults, started, stop))
        await run_clients(workload, client, plan, started, stop)
        remaining = started + plan.duration_s - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)
        stop.set()
        await nemesis_task
        final = await final_phase(workload, client, cluster, nemesis, history, notes)
        for consumer in consumers:
            consumer.stopped.set()
        await asyncio.gather(*consumer_tasks)
        if cluster.disks is not None:
            final.state["power_restarts"] = cluster.disks.restarts
        if loaded is not None:
            admin = {node.id: NodeClient(session, node.base_url, TOKEN_ADMIN) for node in cluster.nodes.values()}
            read = await preload.read_back(client, admin, await asyncio.to_thread(cluster.leader) or cluster.node_ids[0])
            final.state["preload"] = {"result": loaded.to_json(), "read": asdict(read)}
            final.notes.append(f"preload read back in {read.seconds:.1f} s ({read.pages} pages)"
                               + (f": {read.problem}" if read.problem else ""))
        return workload, final


def run_once(options: RunOptions) -> tuple[int, dict]:
    options.store.mkdir(parents=True, exist_ok=True)
    name = run_name(options)
    run_dir = options.store / name
    run_dir.mkdir(parents=True)
    point_latest(options.store, run_dir)
    workload = make_workload(options.workload)
    lazy = needs_lazy_fs(options.nemesis)
    cluster = Cluster(run_dir, ClusterSpec(settings=dict(HARNESS_SETTINGS),
                                           data_dir_name=MOUNT_DIR_NAME if lazy else "data"))
    plan = make_plan(workload, options.nemesis, options.seed, options.duration_s, options.rate,
                     len(cluster.node_ids), options.concurrency, options.preload)
    (run_dir / "plan.json").write_text(json.dumps(plan.to_json(), indent=1) + "\n", encoding="utf-8")
    history = HistoryWriter(run_dir / "history.jsonl")
    notes: list[str] = [f"nodes ran with QUEEN_RAFT_FSYNC={os.environ.get('QUEEN_RAFT_FSYNC', 'group')}"
                        + (", their data dirs on lazy filesystems (jepsen/lazyfs/)" if lazy else "")]
    started_wall_ms = int(time.time() * 1000)
    properties: dict = {}
    try:
        if lazy:
            cluster.disks = PowerDisks(run_dir, cluster.node_ids)
            cluster.disks.mount_all()
        if not cluster.boot(BOOT_TIMEOUT_S):
            notes.append(f"the cluster did not become healthy within {BOOT_TIMEOUT_S:.0f} s of boot; see nodes/*.log")
        else:
            workload, final = asyncio.run(_drive(options, plan, cluster, history, notes))
            notes += final.notes
            (run_dir / "final.json").write_text(json.dumps({"logs": final.logs, "notes": final.notes,
                                                            "replica_logs": final.replica_logs,
                                                            "state": final.state}) + "\n",
                                                encoding="utf-8")
            operations = pair_operations(history.events)
            log_complete = not any("fetch" in note for note in final.notes)
            properties = judge(workload, operations, fault_windows(history.events), final)
            if not log_complete:
                notes.append("the final read of the log was incomplete: loss checks are not judged as passes")
    except Exception:
        notes.append("the harness raised: " + traceback.format_exc(limit=8))
    finally:
        history.close()
        cluster.close()
        if cluster.disks is not None:
            cluster.disks.close(cluster)
    (run_dir / "cluster.json").write_text(json.dumps(cluster.describe(), indent=1) + "\n", encoding="utf-8")
    operations = pair_operations(history.events)
    notes += snapshot_fault_notes(history.events, SNAPSHOT_FAULTS)
    summary = summarize(name, plan.to_json(), command_line(options), properties, operations, history.events, notes)
    if not properties:
        summary["valid"] = None
    fires = _fire_points(properties)
    png_note = draw_timeline(run_dir / "timeline.png", operations, fault_windows(history.events), fires,
                             started_wall_ms, options.concurrency)
    summary["timeline"] = png_note
    write_results(run_dir, summary)
    (run_dir / "report.md").write_text(render_markdown(summary, png_note), encoding="utf-8")
    return exit_code(summary["valid"]), summary


def recheck(run_dir: Path) -> tuple[int, dict]:
    """Judges a stored run again from its history.jsonl and final.json (after a checker change)."""
    from jepsen.history import read_events
    from jepsen.workloads import FinalReads

    summary = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    events = read_events(run_dir / "history.jsonl")
    stored = json.loads((run_dir / "final.json").read_text(encoding="utf-8"))
    final = FinalReads(logs=stored["logs"], notes=stored["notes"], replica_logs=stored.get("replica_logs", {}),
                       state=stored.get("state", {}))
    operations = pair_operations(events)
    properties = judge(make_workload(summary["workload"]), operations, fault_windows(events), final)
    summary["properties"] = properties
    summary["valid"] = overall_valid(properties)
    write_results(run_dir, summary)
    (run_dir / "report.md").write_text(render_markdown(summary, summary.get("timeline", "")), encoding="utf-8")
    return exit_code(summary["valid"]), summary


def judge(workload, operations, windows, final) -> dict:
    """The workload's properties, plus preload_retained when the run preloaded timers."""
    properties = workload.check(operations, windows, final)
    loaded = final.state.get("preload")
    if loaded:
        properties["preload_retained"] = preload.check_preload_retained(loaded["result"], loaded["read"])
    if "power_restarts" in final.state:
        properties["starts_after_power_loss"] = check_starts_after_power_loss(final.state["power_restarts"])
    return properties


def _fire_points(properties: dict) -> list[tuple[int, int]]:
    points = properties.get("lateness", {}).get("points") if properties else None
    return [tuple(p) for p in points] if points else []


def print_summary(summary: dict, stream=sys.stdout) -> None:
    lateness = summary["properties"].get("lateness", {})
    print(f"{summary['run']}: {verdict_word(summary['valid'])} "
          f"({summary['operation_count']} ops, faults {summary['faults']})", file=stream)
    for name, prop in summary["properties"].items():
        if name == "lateness":
            continue
        print(f"  {name:40s} {verdict_word(prop.get('valid')):8s} violations={prop.get('violations')}", file=stream)
    if lateness:
        for measure in ("fire_lag_ms", "visible_lag_ms"):
            for period in ("quiet", "fault"):
                figures = lateness[measure][period]
                print(f"  {measure} {period:5s} n={figures['count']} p50={figures['p50']} p99={figures['p99']} "
                      f"max={figures['max']}", file=stream)
    for note in summary.get("notes", []):
        print(f"  note: {note.strip()[:300]}", file=stream)


# The full campaign: every workload under each nemesis it is meant for, several seeds, as
# (workload, nemesis, seed, preload). Each run is about duration + 20-90 s of final phase; a run over
# a preloaded million timers adds about a minute to load them and a minute to read them back.
CAMPAIGN_PRELOAD = 1_000_000
CAMPAIGN = (
    [("timers", nemesis, seed, 0) for nemesis in ("kill", "pause", "partition", "clock") for seed in (1, 2)]
    + [("timers", nemesis, seed, CAMPAIGN_PRELOAD) for nemesis in ("mixed",) + SNAPSHOT_FAULTS for seed in (1, 2)]
    + [("timers-remembered", nemesis, 1, 0) for nemesis in ("kill", "partition")]
    + [("queue", nemesis, 1, 0) for nemesis in ("kill", "partition", "mixed")]
    + [("dedup", nemesis, 1, 0) for nemesis in ("kill", "mixed")]
    + [("txn", nemesis, 1, 0) for nemesis in ("kill", "partition", "mixed")]
    + POWER_CAMPAIGN
)
CAMPAIGN_DURATION_S = 60.0


def run_campaign(duration_s: float = CAMPAIGN_DURATION_S, rate: float = 20.0, store: Path = STORE) -> int:
    rows = []
    worst = EXIT_VALID
    for workload, nemesis, seed, preloaded in CAMPAIGN:
        code, summary = run_once(RunOptions(workload, nemesis, seed, duration_s, rate, store=store,
                                            preload=preloaded))
        print_summary(summary)
        worst = max(worst, code)
        rows.append(summary)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    path = store / f"campaign-{stamp}.md"
    path.write_text(render_campaign(rows), encoding="utf-8")
    print(f"campaign table: {path}")
    return worst


def render_campaign(rows: list[dict]) -> str:
    names: list[str] = []
    for row in rows:
        for name in row["properties"]:
            if name not in names and name != "lateness":
                names.append(name)
    lines = ["# Fault campaign", "", "| run | ops | faults | " + " | ".join(names) +
             " | fire lag quiet p50/p99/max | fire lag fault p50/p99/max |",
             "| --- | --- | --- | " + " | ".join("---" for _ in names) + " | --- | --- |"]
    for row in rows:
        props = row["properties"]
        cells = [verdict_word(props[n]["valid"]) if n in props else "-" for n in names]
        lag = props.get("lateness", {}).get("fire_lag_ms", {})

        def triple(period: str) -> str:
            figures = lag.get(period) or {}
            return "/".join("-" if figures.get(k) is None else str(figures[k]) for k in ("p50", "p99", "max"))

        lines.append(f"| {row['run']} | {row['operation_count']} | {sum(row['faults'].values())} | "
                     + " | ".join(cells) + f" | {triple('quiet')} | {triple('fault')} |")
    return "\n".join(lines) + "\n"
