"""What idle tenants cost: CPU per node of a three-node cluster that holds N tenants and no traffic.

`python -m bench.idle_cost [--tenants 1 8 32] [--seconds 25] [--settle 5]`

For each N: starts three real nodes on 127.0.0.1 (tests/integration/cluster_fixture.py's
NodeCluster, from a temp config, cwd = this tree), waits until every node agrees on a leader for
every group, lets them settle, then reads each node's utime + stime (/proc/PID/stat) over the
window and prints the share of one core per node, and the cluster's sum. Stops the nodes by PID.
Add `--profile-seconds S` to also record a py-spy raw profile of node n1 (its pid in the output)
into a file beside the printed figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.process_usage import cpu_seconds
from bench.queen_service import NodeCluster, compile_bytecode

REPO = Path(__file__).resolve().parents[1]
# 32 groups elect their leaders one after another on a shared 2-core machine.
READY_TIMEOUT_S = 120.0


def tenant_names(count: int) -> tuple[str, ...]:
    return tuple(f"t{i:03d}" for i in range(count))


def measure(tenants: int, seconds: float, settle_s: float, profile_s: float = 0.0) -> dict:
    """Share of one core per node (n1, n2, n3) over `seconds` of an idle cluster of `tenants`."""
    workdir = Path(tempfile.mkdtemp(prefix="queen-idle-"))
    cluster = NodeCluster(workdir, tenants=tenant_names(tenants))
    try:
        cluster.write_config()
        for node_id in cluster.node_ids:
            cluster.start_node(node_id)
        cluster.wait_ready(timeout_s=READY_TIMEOUT_S)
        time.sleep(settle_s)
        pids = {n: p.pid for n, p in cluster.processes.items()}
        profile = None
        if profile_s > 0:
            out = workdir.parent / f"idle-{tenants}-n1-{int(time.time())}.txt"
            profile = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pids["n1"]),
                                        "--gil", "--threads", "--rate", "500", "--format", "raw", "--nonblocking",
                                        "--duration", str(int(profile_s)), "--output", str(out)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = {n: cpu_seconds(pid) for n, pid in pids.items()}
        started = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        after = {n: cpu_seconds(pid) for n, pid in pids.items()}
        if profile is not None:
            profile.wait()
        if not all(cluster.running(n) for n in cluster.node_ids):
            raise RuntimeError("a node exited during the window")
        per_node = {n: round(100 * (after[n] - before[n]) / elapsed, 2) for n in pids}
        result = {"tenants": tenants, "seconds": round(elapsed, 1), "core_percent_per_node": per_node,
                  "core_percent_cluster": round(sum(per_node.values()), 2)}
        if profile is not None:
            result["profile"] = str(out)
        return result
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=25.0, help="measured window")
    parser.add_argument("--settle", type=float, default=5.0, help="pause between ready and the window")
    parser.add_argument("--profile-seconds", type=float, default=0.0, help="py-spy raw profile of n1 (0: none)")
    args = parser.parse_args(argv)
    compile_bytecode()
    for tenants in args.tenants:
        print(json.dumps(measure(tenants, args.seconds, args.settle, args.profile_seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
