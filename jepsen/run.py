"""One run end to end, and a campaign of runs.

A run: write the plan, boot the cluster, run clients, consumers and nemesis for the duration, run
the final phase, check, write the report. A run holds the workload it is named for and its
companions in the other tenant (workloads/__init__.py, COMPANIONS), side by side; each workload's
properties are judged on its own operations and read-back, and named `<workload>/<property>`.
Exit status 0 when every judged property holds, 1 when one fails, 2 when the run could not be
judged (cluster never came up, a property unknown).
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
from jepsen.cluster import TENANT_TOKENS, Cluster, ClusterSpec
from jepsen.generator import DEFAULT_CONCURRENCY, RunPlan, final_phase, make_plan, run_clients
from jepsen.history import HistoryWriter, fault_windows, pair_operations, workload_operations
from jepsen.nemesis import SNAPSHOT_FAULTS, Nemesis
from jepsen.power import MOUNT_DIR_NAME, POWER_CAMPAIGN, PowerDisks, check_starts_after_power_loss, needs_lazy_fs
from jepsen.report import (CONSUMER_PROCESS_BASE, draw_timeline, find_property, point_latest, render_campaign,
                           render_markdown, summarize, verdict_word, workload_properties, write_results)
from jepsen.snapshots import snapshot_fault_notes
from jepsen.workloads import FinalReads, make_workload, run_workloads
from jepsen.workloads.messages import Consumer

STORE = Path(__file__).resolve().parent / "store"
# The cluster must elect a leader within this at boot, or the run is abandoned as unjudgeable.
BOOT_TIMEOUT_S = 60.0
# Connections the harness may hold open at once (clients + long-polling consumers + final reads).
HTTP_CONNECTION_LIMIT = 64
# Settings of every harness cluster. A snapshot starts once the log holds this many entries past the
# last one (the default, 2000, is a minute or more of a run's load): a run then sees several
# snapshots, and the snapshot nemeses find writers running within seconds; the log is not made to
# wait until it is worth a snapshot next to the last one (ratio 0), so that holds whatever the
# workload's entries weigh. The pending-timer quota
# is set far above any preload, so a default quota can never refuse one.
HARNESS_SETTINGS = {"log_compaction_min_entries": 500, "log_compaction_log_to_snapshot_ratio": 0,
                    "timers_max_pending": 5_000_000}

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
    companions: list[str] | None = None  # None: COMPANIONS[workload]; [] runs the workload alone

    @property
    def workloads(self) -> list[str]:
        return run_workloads(self.workload, self.companions)


def exit_code(valid: bool | None) -> int:
    return {True: EXIT_VALID, False: EXIT_INVALID, None: EXIT_UNKNOWN}[valid]


def run_name(options: RunOptions) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{stamp}-{'+'.join(options.workloads)}-{options.nemesis}-s{options.seed}"


def command_line(options: RunOptions) -> str:
    return shlex.join([
        "python", "-m", "jepsen", "run", "--workload", options.workload, "--nemesis", options.nemesis,
        "--seed", str(options.seed), "--duration", f"{options.duration_s:g}", "--rate", f"{options.rate:g}",
        "--concurrency", str(options.concurrency),
    ] + (["--preload", str(options.preload)] if options.preload else [])
      + ([] if options.companions is None else ["--with", ",".join(options.companions) or "none"]))


async def _drive(options: RunOptions, plan: RunPlan, cluster: Cluster, history: HistoryWriter,
                 notes: list[str]):
    workloads = [make_workload(name) for name in plan.workloads]
    nemesis = Nemesis(cluster, history)
    urls = {node.id: node.base_url for node in cluster.nodes.values()}
    async with open_session(HTTP_CONNECTION_LIMIT) as session:
        clients = [(workload, HistoryClient(session, history, urls, TENANT_TOKENS[workload.tenant][0], workload.name))
                   for workload in workloads]
        for workload, client in clients:
            notes += await workload.setup(client, "setup")
        loaded = None
        primary, primary_client = clients[0]
        if options.preload:
            loaded = await preload.preload(primary_client, options.preload, lambda: cluster.leader(primary.tenant))
            notes.append(f"preload: {loaded.acknowledged} of {options.preload} timers acknowledged in "
                         f"{loaded.seconds:.1f} s ({loaded.calls} calls of up to {preload.OPS_PER_CALL})")
        consumers: list[Consumer] = []
        stride = 1000  # consumer process ids live above the clients' and never collide
        for workload, client in clients:
            for spec in workload.consumers():
                for index in range(spec.count):
                    consumers.append((spec.factory or Consumer)(
                        client, spec.queue, spec.group, first_process=CONSUMER_PROCESS_BASE + len(consumers),
                        process_stride=stride, node_index=len(consumers)))
        consumer_tasks = [asyncio.create_task(consumer.run()) for consumer in consumers]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = loop.time()
        nemesis_task = asyncio.create_task(nemesis.run(plan.faults, started, stop))
        await asyncio.gather(*(run_clients(workload, client, plan, started, stop, position * plan.concurrency)
                               for position, (workload, client) in enumerate(clients)))
        remaining = started + plan.duration_s - loop.time()
        if remaining > 0:
            await asyncio.sleep(remaining)
        stop.set()
        await nemesis_task
        finals = await final_phase(clients, cluster, nemesis, history, notes)
        for consumer in consumers:
            consumer.stopped.set()
        await asyncio.gather(*consumer_tasks)
        if cluster.disks is not None:
            finals[primary.name].state["power_restarts"] = cluster.disks.restarts
        if loaded is not None:
            admin_token = TENANT_TOKENS[primary.tenant][1]
            admin = {node.id: NodeClient(session, node.base_url, admin_token) for node in cluster.nodes.values()}
            leader = await asyncio.to_thread(cluster.leader, primary.tenant)
            read = await preload.read_back(primary_client, admin, leader or cluster.node_ids[0])
            final = finals[primary.name]
            final.state["preload"] = {"result": loaded.to_json(), "read": asdict(read)}
            final.notes.append(f"preload read back in {read.seconds:.1f} s ({read.pages} pages)"
                               + (f": {read.problem}" if read.problem else ""))
        return workloads, finals


def _final_json(final: FinalReads) -> dict:
    return {"logs": final.logs, "notes": final.notes, "replica_logs": final.replica_logs, "state": final.state}


def run_once(options: RunOptions) -> tuple[int, dict]:
    options.store.mkdir(parents=True, exist_ok=True)
    name = run_name(options)
    run_dir = options.store / name
    run_dir.mkdir(parents=True)
    point_latest(options.store, run_dir)
    workloads = [make_workload(name) for name in options.workloads]
    lazy = needs_lazy_fs(options.nemesis)
    cluster = Cluster(run_dir, ClusterSpec(settings=dict(HARNESS_SETTINGS),
                                           data_dir_name=MOUNT_DIR_NAME if lazy else "data"))
    plan = make_plan(workloads, options.nemesis, options.seed, options.duration_s, options.rate,
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
            workloads, finals = asyncio.run(_drive(options, plan, cluster, history, notes))
            for workload_name, final in finals.items():
                notes += [f"{workload_name}: {note}" for note in final.notes]
            (run_dir / "final.json").write_text(json.dumps({"workloads": {w: _final_json(final) for w, final
                                                                          in finals.items()}}) + "\n",
                                                encoding="utf-8")
            operations = pair_operations(history.events)
            properties = judge(workloads, operations, fault_windows(history.events), finals)
            if any("fetch" in note for final in finals.values() for note in final.notes):
                notes.append("the final read of a log was incomplete: loss checks are not judged as passes")
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
    summary = summarize(name, plan.to_json(), command_line(options), properties, operations, history.events, notes,
                        {workload.name: workload.tenant for workload in workloads})
    if not properties:
        summary["valid"] = None
    fires = _fire_points(properties)
    png_note = draw_timeline(run_dir / "timeline.png", operations, fault_windows(history.events), fires,
                             started_wall_ms, options.concurrency * len(workloads))
    summary["timeline"] = png_note
    write_results(run_dir, summary)
    (run_dir / "report.md").write_text(render_markdown(summary, png_note), encoding="utf-8")
    return exit_code(summary["valid"]), summary


def recheck(run_dir: Path) -> tuple[int, dict]:
    """Judges a stored run again from its history.jsonl and final.json (after a checker change)."""
    from jepsen.history import read_events

    summary = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    events = read_events(run_dir / "history.jsonl")
    stored = json.loads((run_dir / "final.json").read_text(encoding="utf-8"))
    # A run that held one workload stored its reads at the top level.
    by_workload = stored.get("workloads") or {summary["workload"]: stored}
    finals = {name: FinalReads(logs=reads["logs"], notes=reads["notes"], replica_logs=reads.get("replica_logs", {}),
                               state=reads.get("state", {})) for name, reads in by_workload.items()}
    operations = pair_operations(events)
    properties = judge([make_workload(name) for name in finals], operations, fault_windows(events), finals)
    summary["properties"] = properties
    summary["valid"] = overall_valid(properties)
    for name, facts in summary.get("workloads", {}).items():
        facts["valid"] = overall_valid(workload_properties(properties, name))
    write_results(run_dir, summary)
    (run_dir / "report.md").write_text(render_markdown(summary, summary.get("timeline", "")), encoding="utf-8")
    return exit_code(summary["valid"]), summary


def judge(workloads: list, operations, windows, finals: dict[str, FinalReads]) -> dict:
    """Each workload's properties on its own operations and read-back, as `<workload>/<property>`,
    plus `<workload>/preload_retained` for the workload whose client preloaded timers and, after
    power faults, `<workload>/starts_after_power_loss` for the first workload (the restarts are
    the nodes', one list for the run)."""
    properties = {}
    for workload in workloads:
        final = finals[workload.name]
        judged = workload.check(workload_operations(operations, workload.name), windows, final)
        loaded = final.state.get("preload")
        if loaded:
            judged["preload_retained"] = preload.check_preload_retained(loaded["result"], loaded["read"])
        if "power_restarts" in final.state:
            judged["starts_after_power_loss"] = check_starts_after_power_loss(final.state["power_restarts"])
        properties.update({f"{workload.name}/{name}": prop for name, prop in judged.items()})
    return properties


def _fire_points(properties: dict) -> list[tuple[int, int]]:
    points = find_property(properties, "lateness").get("points") if properties else None
    return [tuple(p) for p in points] if points else []


def print_summary(summary: dict, stream=sys.stdout) -> None:
    lateness = find_property(summary["properties"], "lateness")
    print(f"{summary['run']}: {verdict_word(summary['valid'])} "
          f"({summary['operation_count']} ops, faults {summary['faults']})", file=stream)
    for name, prop in summary["properties"].items():
        if name.rsplit("/", 1)[-1] == "lateness":
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


# The full campaign, as (workload, nemesis, seed, preload). Each run holds both tenants (COMPANIONS):
# a timers run is timers | queue + txn, so queue and txn run under every nemesis of the timers runs.
# Runs are chosen to keep `make jepsen` within CAMPAIGN_BUDGET_S with room for about six more
# one-minute runs: two seeds for kill, partition and mixed (faults drawn from several), one for a
# single repeated fault (pause, each snapshot nemesis) and for clock (the mixed runs draw clock faults
# too); the million preloaded timers where a snapshot must take seconds to write.
CAMPAIGN_PRELOAD = 1_000_000
CAMPAIGN = (
    [("timers", nemesis, seed, 0) for nemesis in ("kill", "partition") for seed in (1, 2)]
    + [("timers", "clock", 1, 0), ("timers", "pause", 1, 0), ("timers", "mixed", 2, 0)]
    + [("timers", nemesis, 1, CAMPAIGN_PRELOAD) for nemesis in ("mixed",) + SNAPSHOT_FAULTS]
    + [("timers-remembered", "kill", 1, 0), ("dedup", "mixed", 1, 0)]
    + POWER_CAMPAIGN
)
# What a run costs beyond its duration: boot, the final phase (restart, the wait for due timers, the
# reads of every workload), checks and the timeline; a preloaded million timers add their load and
# read-back (jepsen/README.md, "A large state"). Used only to keep the campaign within its budget.
RUN_OVERHEAD_S = 35.0
PRELOAD_MILLION_S = 160.0
CAMPAIGN_BUDGET_S = 40 * 60.0
CAMPAIGN_DURATION_S = 60.0


def campaign_estimate_s(runs, duration_s: float = CAMPAIGN_DURATION_S) -> float:
    """The campaign's expected length in seconds, from RUN_OVERHEAD_S and PRELOAD_MILLION_S."""
    return sum(duration_s + RUN_OVERHEAD_S + PRELOAD_MILLION_S * preloaded / 1_000_000
               for _, _, _, preloaded in runs)


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
