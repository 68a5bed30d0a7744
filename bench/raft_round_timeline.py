"""Where one Raft commit round waits: a timeline of stamps on the three nodes of a group.

    .venv/bin/python bench/raft_round_timeline.py [--rounds 1000] [--gap-ms 5] [--base-port 17830]

Starts three fresh nodes on 127.0.0.1 as raft_entry_cost.py does (its CounterState, a Raft
password, fsync="group", no timer tick loop), and has the leader propose one command at a time from
its loop, each after the previous answer and a pause of --gap-ms (so rounds never overlap). Each
node stamps `time.perf_counter_ns()` (CLOCK_MONOTONIC, one clock for every process of the machine)
at each stage of the round it sees: its tick thread waking from poll, the messages it receives and
sends, the journal append, the flush (fdatasync), an acknowledgement held behind the flush, the
apply, the result handoff to the loop thread and the loop's drain, with the thread's CPU time
(`time.thread_time_ns()`). Prints, per node and stage, the median and 90th percentile offset from
the proposal of the first such stamp in each round (a stage seen again in a round is listed once
more as "(last)"), in the order of the medians, and the median wall and CPU time its thread spent
since its stamp before: wall well above CPU is a wait (a core, the GIL, the disk). --show-round N
also prints every stamp of round N. The stamps are set on the classes, in the node processes
only; the nodes import this tree's queen_raft. Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from raft_entry_cost import (  # run as a script: bench/ is on sys.path
    NODES,
    PASSWORD_ENV,
    node_arguments,
    statuses,
    wait_for_leader,
)
from raft_fsync_bench import http, stop_nodes

STAMPS: list[tuple[int, int, int, str]] = []


def stamp(name: str) -> None:
    STAMPS.append((time.perf_counter_ns(), time.thread_time_ns(), threading.get_ident(), name))


def around(cls, method: str, before: str | None = None, after: str | None = None, when=None) -> None:
    """Wraps cls.method with stamps before and after the call (when(self, *args) says whether)."""
    inner = getattr(cls, method)

    def wrapped(self, *args, **kwargs):
        stamped = when is None or when(self, *args)
        if stamped and before:
            stamp(before(args) if callable(before) else before)
        try:
            return inner(self, *args, **kwargs)
        finally:
            if stamped and after:
                stamp(after(args) if callable(after) else after)

    setattr(cls, method, wrapped)


def message_kind(args) -> str:
    message = args[1]
    return message.get("type", "?") if isinstance(message, dict) else type(message).__name__


class StampingPoll:
    """Stands for the select.poll object of pysyncobj's PollPoller: stamps each return with events."""

    def __init__(self, poll) -> None:
        self._poll = poll

    def poll(self, timeout_ms):
        stamp("tick: poll sleeps")
        events = self._poll.poll(timeout_ms)
        if events:
            stamp("tick: poll woke")
        return events

    def __getattr__(self, name):
        return getattr(self._poll, name)


def install_stamps(group) -> None:
    from queen_raft.raft.connection import FastTcpConnection
    from queen_raft.raft.handoff import ResultHandoff
    from queen_raft.raft.journal import GroupCommitJournal
    from queen_raft.raft.transport import GroupTransport

    syncobj = group._syncobj
    syncobj_class = type(syncobj)
    poller = syncobj._poller
    poller._PollPoller__poll = StampingPoll(poller._PollPoller__poll)
    around(syncobj_class, "_onTick", before="tick: begins")
    around(syncobj_class, "_checkCommandsToApply", before="tick: takes queued commands")
    around(syncobj_class, "_SyncObj__applyLogEntries", before="tick: applies committed", after="tick: applied",
           when=lambda self: self._SyncObj__raftCommitIndex > self._SyncObj__raftLastApplied)
    around(GroupTransport, "_onMessageReceived", before=lambda args: f"recv {message_kind(args)}")
    around(GroupTransport, "_send_now", after=lambda args: f"sent {message_kind(args)}")
    around(GroupTransport, "send", before=lambda args: f"held {message_kind(args)}",
           when=lambda self, node, message: self.group_commit_journal is not None and (
               self._held.get(node) is not None or (isinstance(message, dict) and message.get("type") == "next_node_idx"
                                                    and self.group_commit_journal.dirty)))
    around(GroupCommitJournal, "add", after="journal: appended")
    around(GroupCommitJournal, "sync_to_disk", before="journal: fdatasync begins", after="journal: fdatasync done")
    around(FastTcpConnection, "send", before="conn: send begins", after="conn: send done")
    around(ResultHandoff, "put", before="handoff: put (tick thread)")
    around(ResultHandoff, "_drain", before="handoff: drain (loop thread)")


async def run_node(args) -> None:
    from aiohttp import web
    from raft_fsync_bench import CounterState, serve_until_sigterm

    from queen_raft.raft import RaftSettings, TenantGroup

    sys.setswitchinterval(args.switch_interval_ms / 1000)  # node.py's GIL_SWITCH_INTERVAL_S by default
    addrs = [f"127.0.0.1:{args.base_port + i}" for i in range(NODES)]
    group = TenantGroup("bench", addrs[args.index], addrs, args.data_dir,
                        RaftSettings(fsync="group", tick_ms=0, password=os.environ[PASSWORD_ENV]),
                        CounterState, CounterState.restore)
    install_stamps(group)
    selector = asyncio.get_running_loop()._selector
    select = selector.select

    def stamping_select(timeout=None):
        events = select(timeout)
        if events:
            stamp("loop: epoll woke")
        return events

    selector.select = stamping_select

    async def status(request):
        st = group.status()
        return web.json_response({"role": st["role"], "leader": st["leader"], "commitIndex": st["commitIndex"],
                                  "ticks": 0, "threads": {}})

    async def stamps(request):
        taken = list(STAMPS)
        STAMPS.clear()
        return web.json_response(taken)

    async def rounds(request):
        spec = await request.json()
        STAMPS.clear()
        for _ in range(spec["count"]):
            await asyncio.sleep(spec["gap_ms"] / 1000)
            stamp("loop: propose")
            await group.propose({"op": "add", "body": b"x" * 100})
            stamp("loop: answered")
        return web.json_response({})

    app = web.Application()
    app.add_routes([web.get("/status", status), web.get("/stamps", stamps), web.post("/rounds", rounds)])
    await serve_until_sigterm(app, args.base_port + 10 + args.index, group)


def timeline(by_node: list[list], roles: list[str]) -> list[dict]:
    """Per node and stage, over the rounds: the offset (us) from the round's proposal of the stage's
    first stamp in it, and the wall and CPU time its thread spent since that thread's stamp before
    (wall much above CPU: the thread waited, for a core, the GIL or a syscall)."""
    leader = roles.index("leader")
    starts = [at for at, _, _, name in by_node[leader] if name == "loop: propose"]
    offsets: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    last: dict[tuple[int, int, str], tuple[float, float, float]] = {}
    for node, stamps in enumerate(by_node):
        round_index, seen = -1, set()
        previous: dict[int, tuple[int, int]] = {}  # thread -> its stamp before (wall, cpu)
        for at, cpu, thread, name in sorted(stamps):
            while round_index + 1 < len(starts) and at >= starts[round_index + 1]:
                round_index, seen = round_index + 1, set()
            before = previous.get(thread, (at, cpu))
            previous[thread] = (at, cpu)
            if round_index < 0:
                continue
            stamped = ((at - starts[round_index]) / 1000, (at - before[0]) / 1000, (cpu - before[1]) / 1000)
            if name in seen:  # a stage seen again in the round: its last time counts as a stage too
                last[(node, round_index, name)] = stamped
                continue
            seen.add(name)
            offsets.setdefault((node, name), []).append(stamped)
    for (node, _, name), stamped in last.items():
        offsets.setdefault((node, name + " (last)"), []).append(stamped)
    rows = []
    for (node, name), found in offsets.items():
        at = sorted(f[0] for f in found)
        rows.append({"node": f"{roles[node]}{node}", "stage": name, "rounds": len(found),
                     "p50_us": round(statistics.median(at)), "p90_us": round(at[int(0.9 * (len(at) - 1))]),
                     "since_thread_stamp_wall_us": round(statistics.median(f[1] for f in found)),
                     "cpu_us": round(statistics.median(f[2] for f in found))})
    rows.sort(key=lambda row: row["p50_us"])
    return rows


def show_round(by_node: list[list], roles: list[str], index: int) -> None:
    """Prints every stamp of one round, all nodes merged in time order."""
    starts = sorted(at for at, _, _, name in by_node[roles.index("leader")] if name == "loop: propose")
    begin, end = starts[index], starts[index + 1]
    merged = sorted((at, cpu, thread, name, node) for node, stamps in enumerate(by_node)
                    for at, cpu, thread, name in stamps if begin <= at < end)
    for at, cpu, thread, name, node in merged:
        print(f"{(at - begin) / 1000:8.0f} us  {roles[node]}{node} {thread % 10000:4d} {name}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "node":
        parser = node_arguments()
        parser.add_argument("--switch-interval-ms", type=float, required=True)
        asyncio.run(run_node(parser.parse_args()))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--gap-ms", type=float, default=5.0, help="pause between an answer and the next proposal")
    parser.add_argument("--base-port", type=int, default=17830,
                        help="Raft ports base..base+2, HTTP ports base+10..base+12")
    parser.add_argument("--switch-interval-ms", type=float, default=0.5,
                        help="the nodes' sys.setswitchinterval in ms (node.py's GIL_SWITCH_INTERVAL_S: 0.5)")
    parser.add_argument("--show-round", type=int, help="also print every stamp of this round")
    args = parser.parse_args()
    data_root = tempfile.mkdtemp(prefix="raft-round-timeline-")
    env = dict(os.environ, **{PASSWORD_ENV: secrets.token_urlsafe(32)})
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    # The nodes import the queen_raft of this tree (bench/..), not the one the venv installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [bench_dir, os.path.dirname(bench_dir), env.get("PYTHONPATH")]))
    processes = []
    try:
        for i in range(NODES):
            processes.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "node", "--index", str(i),
                 "--data-dir", os.path.join(data_root, f"n{i}"), "--base-port", str(args.base_port),
                 "--switch-interval-ms", str(args.switch_interval_ms)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        found = wait_for_leader(args.base_port)
        roles = [s["role"] for s in found]
        port = args.base_port + 10 + roles.index("leader")
        http("POST", port, "/rounds", {"count": 200, "gap_ms": args.gap_ms})  # warm up
        for i in range(NODES):
            http("GET", args.base_port + 10 + i, "/stamps")
        started = time.monotonic()
        http("POST", port, "/rounds", {"count": args.rounds, "gap_ms": args.gap_ms})
        elapsed = time.monotonic() - started
        by_node = [http("GET", args.base_port + 10 + i, "/stamps") for i in range(NODES)]
        roles = [s["role"] for s in statuses(args.base_port)]
        if args.show_round is not None:
            show_round(by_node, roles, args.show_round)
        print(f"{'node':10s} {'stage':34s} {'p50 us':>7s} {'p90 us':>7s} {'wall':>6s} {'cpu':>6s}  (since the thread's stamp before)")
        for row in timeline(by_node, roles):
            print(f"{row['node']:10s} {row['stage']:34s} {row['p50_us']:7d} {row['p90_us']:7d} "
                  f"{row['since_thread_stamp_wall_us']:6d} {row['cpu_us']:6d}")
        print(json.dumps({"rounds": args.rounds, "mean_round_ms": round(elapsed * 1000 / args.rounds - args.gap_ms, 3)}))
    finally:
        stop_nodes(processes, data_root)


if __name__ == "__main__":
    main()
