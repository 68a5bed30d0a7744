"""What fsync="group" costs against fsync="off": three node processes of one TenantGroup on 127.0.0.1.

    .venv/bin/python bench/raft_fsync_bench.py [--count 3000] [--concurrency 256] [--size 100]
        [--modes off,group] [--passwords on,off]

For each mode it starts three fresh nodes (data under a temp dir), and inside the leader process
(then a follower) measures propose() latency one at a time (p50/p99, ms) and throughput with
--concurrency proposals in flight; then it prints the journal flushes each node made. The workload
runs inside a node process so that the figures are the Raft layer's, not an HTTP client's.
Every process it starts is stopped by PID. --passwords says whether the nodes have a Raft password
(every real node has one: its frames are Fernet-encrypted); `on,off` measures what that costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# The tree's own code, not the venv's editable install (which may be another checkout's): an
# A/B of two exported trees must measure two trees. Node processes run this file and get it too.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The nodes' Raft password travels in the environment, not argv (visible to every user).
PASSWORD_ENV = "QUEEN_BENCH_RAFT_PASSWORD"
# Fixed ports (nodes i = 0..2 use base + i), so that a node process finds its peers; --base-port
# (passed to the nodes in BASE_PORT_ENV) moves them off ports another run or test holds.
BASE_PORT_ENV = "QUEEN_BENCH_RAFT_BASE_PORT"
RAFT_BASE_PORT = int(os.environ.get(BASE_PORT_ENV, "17700"))
HTTP_BASE_PORT = RAFT_BASE_PORT + 10
NODES = 3
START_TIMEOUT_S = 15.0
# The previous mode's nodes (or a child one forked) may hold the fixed ports for a moment after they
# exit: a run waits this long for them to be free.
PORTS_FREE_TIMEOUT_S = 60.0


class CounterState:
    """The smallest state with TenantState's five members: counts entries and bytes."""

    def __init__(self, count: int = 0, size: int = 0) -> None:
        self.count, self.size, self.clock = count, size, 0

    def apply(self, command: dict) -> dict:
        self.clock = max(self.clock, command["now"])
        self.count += 1
        self.size += len(command.get("body", b""))
        return {"count": self.count}

    def next_due_at(self):
        return None

    def snapshot(self) -> bytes:
        return json.dumps([self.count, self.size]).encode()

    @classmethod
    def restore(cls, data: bytes) -> "CounterState":
        return cls(*json.loads(data))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_node(args) -> None:
    from aiohttp import web

    from queen_raft.raft import RaftSettings, TenantGroup

    addrs = [f"127.0.0.1:{RAFT_BASE_PORT + i}" for i in range(NODES)]
    group = TenantGroup("bench", addrs[args.index], addrs, args.data_dir,
                        RaftSettings(fsync=args.fsync, tick_ms=0, password=os.environ.get(PASSWORD_ENV) or None),
                        CounterState, CounterState.restore)
    group.start_tick_loop(asyncio.get_running_loop())

    async def status(request):
        return web.json_response({**group.status(), "journalFlushes": group.journal_flushes})

    async def bench(request):
        spec = await request.json()
        body = os.urandom(spec["size"])
        latencies = []
        for _ in range(spec["count"]):
            started = time.perf_counter()
            await group.propose({"op": "add", "body": body})
            latencies.append((time.perf_counter() - started) * 1000)
        semaphore = asyncio.Semaphore(spec["concurrency"])

        async def one():
            async with semaphore:
                await group.propose({"op": "add", "body": body})

        started = time.perf_counter()
        await asyncio.gather(*[one() for _ in range(spec["count"])])
        elapsed = time.perf_counter() - started
        return web.json_response({
            "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
            "throughput": spec["count"] / elapsed,
        })

    app = web.Application()
    app.add_routes([web.get("/status", status), web.post("/bench", bench)])
    await serve_until_sigterm(app, HTTP_BASE_PORT + args.index, group)


async def serve_until_sigterm(app, port: int, group) -> None:
    """Serves a node's control routes on 127.0.0.1:port until SIGTERM, then stops its group."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    await group.stop()
    await runner.cleanup()
    group.destroy()


def http(method: str, port: int, path: str, body: dict | None = None, timeout: float = 300) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_for_leader() -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            statuses = [http("GET", HTTP_BASE_PORT + i, "/status", timeout=2) for i in range(NODES)]
            leaders = {s["leader"] for s in statuses}
            if len(leaders) == 1 and None not in leaders:
                return [s["role"] for s in statuses].index("leader")
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError("no leader")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_free_ports() -> None:
    ports = [base + i for base in (RAFT_BASE_PORT, HTTP_BASE_PORT) for i in range(NODES)]
    deadline = time.monotonic() + PORTS_FREE_TIMEOUT_S
    while not all(port_free(port) for port in ports):
        if time.monotonic() > deadline:
            raise RuntimeError(f"ports {ports} still taken after {PORTS_FREE_TIMEOUT_S} s")
        time.sleep(0.1)


def run_mode(fsync: str, password: str, args) -> None:
    wait_for_free_ports()
    data_root = tempfile.mkdtemp(prefix=f"raft-fsync-{fsync}-")
    env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
    if password == "on":
        env[PASSWORD_ENV] = secrets.token_urlsafe(32)
    processes = []
    try:
        for i in range(NODES):
            processes.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "node", "--index", str(i), "--fsync", fsync,
                 "--data-dir", os.path.join(data_root, f"n{i}")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            ))
        leader = wait_for_leader()
        follower = (leader + 1) % NODES
        spec = {"count": args.count, "concurrency": args.concurrency, "size": args.size}
        for caller, index in (("leader", leader), ("follower", follower)):
            r = http("POST", HTTP_BASE_PORT + index, "/bench", spec)
            print(f"fsync={fsync:5s} password={password:3s} {caller:8s} {args.size} B: sequential p50 {r['p50']:.2f} ms, "
                  f"p99 {r['p99']:.2f} ms; {args.concurrency} in flight: {r['throughput']:.0f} commits/s")
        entries = 4 * args.count
        flushes = [http("GET", HTTP_BASE_PORT + i, "/status")["journalFlushes"] for i in range(NODES)]
        print(f"fsync={fsync:5s} password={password:3s} journal flushes per node for {entries} entries: {flushes}")
    finally:
        stop_nodes(processes, data_root)


def stop_nodes(processes: list, data_root: str) -> None:
    """SIGTERM to each node process (by its Popen), a kill past 10 s, then its data removed."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(data_root, ignore_errors=True)


def main() -> None:
    global RAFT_BASE_PORT, HTTP_BASE_PORT
    if len(sys.argv) > 1 and sys.argv[1] == "node":
        parser = argparse.ArgumentParser()
        parser.add_argument("node")
        parser.add_argument("--index", type=int, required=True)
        parser.add_argument("--fsync", required=True)
        parser.add_argument("--data-dir", required=True)
        asyncio.run(run_node(parser.parse_args()))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--modes", default="off,group")
    parser.add_argument("--passwords", default="on", help="on, off or on,off: nodes with a Raft password")
    parser.add_argument("--base-port", type=int, default=RAFT_BASE_PORT,
                        help="Raft ports base..base+2, HTTP ports base+10..base+12")
    args = parser.parse_args()
    RAFT_BASE_PORT, HTTP_BASE_PORT = args.base_port, args.base_port + 10
    os.environ[BASE_PORT_ENV] = str(args.base_port)
    for fsync in args.modes.split(","):
        for password in args.passwords.split(","):
            if password not in ("on", "off"):
                parser.error(f"--passwords: {password!r} is neither on nor off")
            run_mode(fsync, password, args)


if __name__ == "__main__":
    main()
