"""CPU one Raft log entry costs each node at a low rate: three node processes of one TenantGroup.

    .venv/bin/python bench/raft_entry_cost.py [--rate 200] [--entries 2000] [--base-port 17800]

Starts three fresh nodes on 127.0.0.1 (raft_fsync_bench.py's CounterState, a Raft password,
fsync="group", no timer tick loop), has the leader propose one command at a time at --rate per
second from its own loop (each its own entry: at this rate proposal batching finds nothing to
join), and reads each thread's CPU time from /proc/<pid>/task/*/stat around the phase. Prints, per
node, the CPU microseconds per committed entry of its main (loop) thread and its pysyncobj tick
thread, and the ticks per entry. CPU time, not a rate, is the figure: the neighbours' load moves
it less. Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The tree's own code, not the venv's editable install (which may be another checkout's): an
# A/B of two exported trees must measure two trees. Node processes run this file and get it too.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from raft_fsync_bench import http, stop_nodes  # run as a script: bench/ is on sys.path

NODES = 3
START_TIMEOUT_S = 30.0
PASSWORD_ENV = "QUEEN_BENCH_RAFT_PASSWORD"
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


async def run_node(args) -> None:
    from aiohttp import web

    from queen_raft.raft import RaftSettings, TenantGroup
    from raft_fsync_bench import CounterState, serve_until_sigterm

    sys.setswitchinterval(0.0005)  # as node.py does (GIL_SWITCH_INTERVAL_S)
    addrs = [f"127.0.0.1:{args.base_port + i}" for i in range(NODES)]
    group = TenantGroup("bench", addrs[args.index], addrs, args.data_dir,
                        RaftSettings(fsync="group", tick_ms=0, password=os.environ[PASSWORD_ENV]),
                        CounterState, CounterState.restore)
    syncobj = group._syncobj
    ticks = [0]
    # Counted on the class: a function set on the instance would sit in the state pysyncobj
    # pickles into each snapshot, and every snapshot writer would fail on it.
    node_class = type(syncobj)
    stock_tick = node_class._onTick

    def counted_tick(self, *tick_args):
        ticks[0] += 1
        return stock_tick(self, *tick_args)

    node_class._onTick = counted_tick

    async def status(request):
        st = group.status()
        return web.json_response({
            "role": st["role"], "leader": st["leader"], "commitIndex": st["commitIndex"], "ticks": ticks[0],
            "threads": {thread.name: thread.native_id for thread in threading.enumerate()},
        })

    async def paced(request):
        spec = await request.json()
        started = time.monotonic()
        pending = []
        for i in range(spec["count"]):
            delay = started + i / spec["rate"] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.ensure_future(group.propose({"op": "add", "body": b"x" * 100})))
        await asyncio.gather(*pending)
        return web.json_response({"seconds": time.monotonic() - started})

    app = web.Application()
    app.add_routes([web.get("/status", status), web.post("/paced", paced)])
    await serve_until_sigterm(app, args.base_port + 10 + args.index, group)


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of a process, by thread id."""
    cpu = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        cpu[int(tid)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S
    return cpu


def thread_role(name: str) -> str:
    if name == "MainThread":
        return "loop"
    return "tick" if "_autoTickThread" in name else "other"


def statuses(base_port: int) -> list[dict]:
    return [http("GET", base_port + 10 + i, "/status", timeout=5) for i in range(NODES)]


def wait_for_leader(base_port: int) -> list[dict]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            found = statuses(base_port)
            if found[0]["leader"] and len({s["leader"] for s in found}) == 1:
                return found
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError("no leader")


def measure(args, pids: list[int]) -> list[dict]:
    found = wait_for_leader(args.base_port)
    leader = [s["role"] for s in found].index("leader")
    port = args.base_port + 10 + leader
    http("POST", port, "/paced", {"rate": args.rate, "count": int(args.rate)})  # one second to warm up
    before, cpu_before = statuses(args.base_port), [thread_cpu_s(pid) for pid in pids]
    http("POST", port, "/paced", {"rate": args.rate, "count": args.entries})
    after, cpu_after = statuses(args.base_port), [thread_cpu_s(pid) for pid in pids]
    entries = after[leader]["commitIndex"] - before[leader]["commitIndex"]
    rows = []
    for i in range(NODES):
        roles = {tid: thread_role(name) for name, tid in after[i]["threads"].items()}
        us = {"loop": 0.0, "tick": 0.0, "other": 0.0}
        for tid, seconds in cpu_after[i].items():
            us[roles.get(tid, "other")] += (seconds - cpu_before[i].get(tid, 0.0)) * 1e6 / entries
        rows.append({"node": i, "role": after[i]["role"], "entries": entries,
                     "ticks_per_entry": round((after[i]["ticks"] - before[i]["ticks"]) / entries, 2),
                     "us_per_entry": round(sum(us.values())), **{f"{k}_us": round(v) for k, v in us.items()}})
    return rows


def node_arguments() -> argparse.ArgumentParser:
    """The arguments a node process of these benches is started with (`<script> node ...`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("node")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--base-port", type=int, required=True)
    return parser


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "node":
        asyncio.run(run_node(node_arguments().parse_args()))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="proposals per second")
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--base-port", type=int, default=17800,
                        help="Raft ports base..base+2, HTTP ports base+10..base+12")
    args = parser.parse_args()
    data_root = tempfile.mkdtemp(prefix="raft-entry-cost-")
    env = dict(os.environ, **{PASSWORD_ENV: secrets.token_urlsafe(32)})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)), env.get("PYTHONPATH")]))
    processes = []
    try:
        for i in range(NODES):
            processes.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "node", "--index", str(i),
                 "--data-dir", os.path.join(data_root, f"n{i}"), "--base-port", str(args.base_port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        rows = measure(args, [p.pid for p in processes])
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"three_nodes_us_per_entry": sum(row["us_per_entry"] for row in rows)}))
    finally:
        stop_nodes(processes, data_root)


if __name__ == "__main__":
    main()
