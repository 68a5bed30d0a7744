"""Scenario 5: a node restarted (after kill -9) with 1,000,000 pending timers.

Ours: a follower of the tenant is killed and started again; the figures are the time until it
answers /health 200 (it serves only after loading its snapshot and journal) and until each of its
groups has applied everything its leader had committed. etcd: the same with a follower member
(serving: it answers a linearizable read; caught up: its applied index reaches what the leader had
applied at the kill). Redis and PostgreSQL: the server is killed and started again; the time
until it answers a query (Redis replays its AOF; PostgreSQL its WAL).
"""

from __future__ import annotations

import asyncio
import datetime
import re
import signal
import time
from pathlib import Path

from bench.pending_load import load_pending, pending_count
from bench.report import ScenarioResult
from bench.system_cpu import CPU_FIGURE_NOTE, SystemCpu
from bench.systems import OURS, each_system
from bench.timer_service import TimerService

TIMERS = {False: 1_000_000, True: 20_000}
RESTART_TIMEOUT_S = 120.0
HEALTH_POLL_S = 0.02
# After the load, the followers finish applying and the groups take a snapshot (compaction) before
# the kill, as they would in service: a node is rarely killed the instant a load ends.
SETTLE_S = 3.0
# The restarted node's log lines that mark its phases (queen_raft/raft/startup_phases.py), the
# moment it serves HTTP and its first leadership line.
PHASE_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: "
                        r"(startup .*|node \S+ serving .*|leadership .*)$")


# A phase line names the file it read; the results keep its tenant and name, not the machine's path.
FILE_PATH = re.compile(r"file=\S*?([^/\s]+/[^/\s]+)(?=\s|$)")


def phase_lines(log_path: Path, since_wall: float) -> list[str]:
    """`+seconds text` for each phase line the node logged after `since_wall` (time.time()), each
    file named by its tenant directory and name only."""
    found = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = PHASE_LINE.match(line)
        if not match:
            continue
        at = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= since_wall - 0.001:
            text = FILE_PATH.sub(r"file=\1", match.group(2))
            found.append(f"+{at - since_wall:.3f} {text}")
    return found


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def restart_queen_follower(service) -> dict:
    cluster = service.cluster
    leader = service.leader()
    follower = next(n for n in cluster.node_ids if n != leader)
    data_bytes = directory_bytes(service.node_data_dir(follower))
    # What the groups had committed when the node went down: it must apply at least that again.
    targets: dict[str, int] = {}
    for node in cluster.node_ids:
        status, body = cluster.health(node)
        for tenant, group in (body or {}).get("groups", {}).items():
            targets[tenant] = max(targets.get(tenant, 0), group.get("commitIndex") or 0)
    cluster.stop_node(follower, signal.SIGKILL)
    started, started_wall = time.monotonic(), time.time()
    cluster.start_node(follower)
    serving_s = caught_up_s = None
    deadline = started + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        status, body = cluster.health(follower)
        if status == 200:
            if serving_s is None:
                serving_s = time.monotonic() - started
            groups = body["groups"]
            if all(groups.get(t, {}).get("appliedIndex", -1) >= index for t, index in targets.items()):
                caught_up_s = time.monotonic() - started
                break
        if not cluster.running(follower):
            raise RuntimeError(f"{follower} exited on restart:\n{cluster.log_tail(follower)}")
        time.sleep(HEALTH_POLL_S)
    return {"restarted": follower, "data_dir_bytes": data_bytes, "serving_s": _round(serving_s),
            "caught_up_s": _round(caught_up_s), "commit_targets": targets,
            "pending_on_restarted_node": service.pending_on(follower),
            "phases": phase_lines(cluster.log_path(follower), started_wall)}


def restart_etcd_follower(service) -> dict:
    """As for ours: a follower member killed and started again; serving once it answers a
    linearizable read, caught up once it applied what the leader had when it went down."""
    leader = service.leader_index()
    follower = next(i for i in range(len(service.members)) if i != leader)
    target = service.applied_index(leader)
    serving_s = service.restart_member_after_crash(follower)
    started = time.monotonic() - serving_s
    caught_up_s = None
    deadline = started + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        applied = service.applied_index(follower)
        if applied is not None and applied >= target:
            caught_up_s = time.monotonic() - started
            break
        time.sleep(HEALTH_POLL_S)
    return {"restarted": f"etcd-m{follower + 1}", "serving_s": _round(serving_s), "caught_up_s": _round(caught_up_s),
            "applied_target": target, "restarted_member": follower}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def measure(service: TimerService, quick: bool) -> dict:
    count = TIMERS[quick]
    load_started = time.monotonic()
    with SystemCpu(service.pids) as load_cpu:
        asyncio.run(load_pending(service, count, "rec"))
    load_s = time.monotonic() - load_started
    time.sleep(SETTLE_S)
    with SystemCpu(service.pids) as restart_cpu:
        if service.name == OURS:
            figures = restart_queen_follower(service)
        elif service.name == "etcd":
            figures = restart_etcd_follower(service)
        else:
            serving_s = service.restart_after_crash()
            figures = {"restarted": "server", "serving_s": _round(serving_s), "caught_up_s": _round(serving_s)}
    if service.name == "etcd":  # counted after the CPU window: the count walks every timer key
        figures["pending_on_restarted_node"] = service.pending_on(figures["restarted_member"])
    figures["load_cpu_us_per_op_all_processes"] = load_cpu.us_per(count)
    figures["restart_cpu_s_all_processes"] = round(restart_cpu.seconds, 3)
    figures["restart_cpu_us_per_pending_timer"] = restart_cpu.us_per(count)
    figures["pending_after_restart"] = figures.get("pending_on_restarted_node", asyncio.run(pending_count(service)))
    figures.update({"timers": count, "load_s": round(load_s, 1)})
    return figures


def run(names: tuple[str, ...], quick: bool, profile: bool = False) -> ScenarioResult:
    result = ScenarioResult("recovery", quick)
    count = TIMERS[quick]
    serving = result.figure(f"restart (kill -9) with {count:,} pending: serving after", "s")
    caught = result.figure("... and its groups caught up after", "s", "<= 10 (ours)")
    pending = result.figure("pending timers after the restart", "")
    load_cpu = result.figure(f"load: {CPU_FIGURE_NOTE} per timer op", "us")
    restart_cpu = result.figure(f"restart until caught up: {CPU_FIGURE_NOTE} per pending timer", "us")
    for name, figures in each_system(names, lambda s: measure(s, quick)):
        result.details[name] = figures
        print(f"   {name}: {figures}", flush=True)
        serving.values[name] = figures["serving_s"]
        caught.values[name] = figures["caught_up_s"]
        pending.values[name] = figures["pending_after_restart"]
        load_cpu.values[name] = figures["load_cpu_us_per_op_all_processes"]
        restart_cpu.values[name] = figures["restart_cpu_us_per_pending_timer"]
    return result
