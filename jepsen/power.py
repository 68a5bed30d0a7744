"""Power loss: nodes whose data dirs sit on lazy filesystems, and the `power` nemesis's faults.

Runs under the `power` and `mixed` nemeses put each node's data dir (`<data_dir>/<node>`) on a lazy
filesystem of its own (jepsen/lazyfs/): the backing directory is `data/<node>` of the run, mounted
at `lazy/<node>`, which the generated config names as its data_dir. Other runs keep plain
directories, at full speed.

The faults:

| fault | what it powers off |
| --- | --- |
| power-one | one node, drawn from the seed (any role) |
| power-minority | the leader and, in clusters of five or more, the fewest others that stay a minority (on three nodes: the leader alone) |
| power-all | every node at once |

Each one kills the node's whole process group with SIGKILL (the node and any forked snapshot
writer, as a real power loss does), then unmounts its lazy filesystem dropping everything that was
never made durable, and mounts it again. Every other power loss is torn instead (`torn_seed`). The nodes stay down for the fault's duration and are
started again at its stop; a node that exits instead of answering /health within the restart bound
(exit 65: it refused its data) is recorded, and `starts_after_power_loss` judges it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from jepsen.lazyfs.mount import LazyMount, lazyfs_unavailable

POWER_FAULTS = ("power-one", "power-minority", "power-all")
# Nemeses whose runs mount the lazy filesystems.
LAZY_NEMESES = ("power", "mixed")
# The config's data_dir when the lazy filesystems are mounted (mountpoints), and their backing dirs.
MOUNT_DIR_NAME = "lazy"
BACKING_DIR_NAME = "data"
# The campaign's power runs (run.py), and the control's (power_control.py): (workload, nemesis, seed, preload).
# A timers run holds queue + txn beside it (workloads/__init__.py, COMPANIONS): two runs put all three
# workloads under power faults on seeds 1 and 2.
POWER_CAMPAIGN = [("timers", "power", seed, 0) for seed in (1, 2)]
# A node restarted after a power loss must answer /health within this (reads its journal again).
RESTART_ANSWER_S = 30.0


def needs_lazy_fs(nemesis: str) -> bool:
    return nemesis in LAZY_NEMESES


class PowerDisks:
    """One lazy filesystem per node of a cluster."""

    def __init__(self, run_dir: Path, node_ids: list[str]) -> None:
        problem = lazyfs_unavailable()
        if problem is not None:
            raise RuntimeError(f"the power nemesis needs a lazy filesystem: {problem}")
        self.mounts = {node: LazyMount(run_dir / BACKING_DIR_NAME / node, run_dir / MOUNT_DIR_NAME / node,
                                       run_dir / "nodes" / f"{node}.lazyfs.log") for node in node_ids}
        self.restarts: list[dict] = []  # every start after a power loss, judged at the end

    def mount_all(self) -> None:
        for mount in self.mounts.values():
            mount.mount()

    def close(self, cluster) -> None:
        """After cluster.close(): ends what the killed nodes forked, then unmounts (keeping all)."""
        for node in cluster.nodes.values():
            if node.process is not None:
                try:
                    os.killpg(node.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for mount in self.mounts.values():
            mount.close()

    def power_off(self, cluster, nodes: list[str], torn_seed: int | None = None) -> dict:
        """Kill each node's process group, drop what it never made durable, mount again. A power-off
        that fails is recorded (and makes starts_after_power_loss unknown); the mount is made again
        all the same, so the node never restarts on a bare mountpoint."""
        for node in nodes:
            kill_process_group(cluster.nodes[node])
        dropped = {}
        for position, node in enumerate(nodes):
            mount = self.mounts[node]
            try:
                dropped[node] = mount.power_off(None if torn_seed is None else torn_seed + position)
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                dropped[node] = {"error": f"{type(error).__name__}: {error}"}
                mount.close()
            if "error" in dropped[node]:
                self.restarts.append({"node": node, "power_off_error": dropped[node]["error"]})
            dropped[node]["torn"] = torn_seed is not None
            mount.mount()
        return dropped

    def restart(self, cluster, nodes: list[str]) -> dict:
        """Start the nodes again; each must answer within RESTART_ANSWER_S or is recorded refusing."""
        for node in nodes:
            if not cluster.nodes[node].alive():
                cluster.start(node)
        outcome = {}
        for node in nodes:
            answered = cluster.wait_answering(node, RESTART_ANSWER_S)
            code = cluster.nodes[node].process.poll()
            outcome[node] = {"answered": answered, "exit": code}
            self.restarts.append({"node": node, "answered": answered, "exit": code, "wall_ms": int(time.time() * 1000)})
        return outcome


def kill_process_group(node) -> bool:
    """SIGKILL to the node and every process it forked (each node runs in a session of its own)."""
    process: subprocess.Popen | None = node.process
    if process is None or process.poll() is not None:
        return False
    if node.paused:
        os.kill(process.pid, signal.SIGCONT)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    node.paused = False
    return True


def torn_seed(at_s: float) -> int | None:
    """Every other power loss is torn (the disk wrote back a drawn half of the unsynced pages, so a
    journal's tail can end in part of a record): decided by the fault's planned instant, so that the
    seeded plan of every nemesis stays as it was."""
    millis = int(round(at_s * 1000))
    return millis if millis % 2 else None


def power_targets(kind: str, node_ids: list[str], leader: str | None, drawn: int) -> list[str]:
    if kind == "power-all":
        return list(node_ids)
    if kind == "power-one":
        return [node_ids[drawn % len(node_ids)]]
    first = leader if leader is not None else node_ids[drawn % len(node_ids)]
    others = [node for node in node_ids if node != first]
    return [first] + others[: (len(node_ids) - 1) // 2 - 1]


def check_starts_after_power_loss(restarts: list[dict]) -> dict:
    """Every node started after a power loss answered: none refused its own (synced) data. Unknown
    when a power-off itself failed (that fault was not the one planned)."""
    refused = [restart for restart in restarts if restart.get("answered") is False]
    failed = [restart for restart in restarts if "power_off_error" in restart]
    valid = False if refused else (None if failed else True)
    return {"valid": valid, "violations": len(refused), "restarts": len(restarts) - len(failed),
            "power_offs_failed": len(failed), "counterexamples": (refused + failed)[:10]}
