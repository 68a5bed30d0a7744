"""`queen-raft cluster up`: runs every node of a config on this machine and supervises them.

The cluster outlives its nodes: when a node exits, one line says which, how (exit status or
signal) and where its log is, and the others go on. `cluster start NODE` (node_control.py) brings
it back; this supervisor adopts every node of the config that runs under its pid file, whoever
started it, so that Ctrl-C, SIGTERM and SIGHUP stop it with the rest, by PID.

During start-up a node that exits stops the whole launch instead: a node that dies before the
cluster ever served is a bad config, a damaged data dir or a port taken, which waiting will not fix.
Nodes already running under their pid files when `cluster up` starts are adopted, not started again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from queen_raft.cli.node_control import (NODE_KILL_TIMEOUT_S, NODE_STOP_TIMEOUT_S, check_startable,
                                         prepare_to_launch)
from queen_raft.cli.node_pids import (describe_exit, is_node_process, launch_lock, log_path, node_command,
                                      remove_pid, running_pid, wait_exit_record, write_pid)
from queen_raft.config import ClusterConfig

POLL_INTERVAL_S = 0.1


class Supervisor:
    """The nodes of one config on this machine: children it started, and nodes it adopted."""

    def __init__(self, config: ClusterConfig, config_path: Path) -> None:
        self.config = config
        self.config_path = config_path
        self.children: dict[str, subprocess.Popen] = {}
        self.adopted: dict[str, int] = {}

    def pid(self, node_id: str) -> int | None:
        child = self.children.get(node_id)
        return child.pid if child is not None else self.adopted.get(node_id)

    def launch_all(self) -> list[str]:
        """Starts (or adopts) every node; the lines to print. Raises NodeCommandError when a node
        cannot start here (its ports are taken): nothing is started twice on the same ports."""
        prepare_to_launch(self.config)
        lines = []
        for node in self.config.nodes:
            with launch_lock(self.config, node.id):
                pid = running_pid(self.config, self.config_path, node.id)
                if pid is not None:
                    self.adopted[node.id] = pid
                    lines.append(f"node {node.id} is already running (pid {pid}): adopted")
                    continue
                check_startable(self.config, self.config_path, node.id)
                with open(log_path(self.config, node.id), "ab") as log:
                    child = subprocess.Popen(
                        node_command(self.config_path, node.id), stdout=log, stderr=subprocess.STDOUT,
                        # Own process group: the terminal's Ctrl-C reaches this launcher, which stops
                        # the nodes in order, instead of every node at once.
                        start_new_session=True,
                    )
                self.children[node.id] = child
                write_pid(self.config, node.id, child.pid)
        return lines

    def exited(self) -> list[tuple[str, str]]:
        """The nodes seen to exit since the last call, each with how: (node id, description)."""
        gone = []
        for node_id, child in list(self.children.items()):
            returncode = child.poll()
            if returncode is not None:
                del self.children[node_id]
                remove_pid(self.config, node_id, child.pid)
                gone.append((node_id, f"pid {child.pid}, {describe_exit(returncode)}"))
        for node_id, pid in list(self.adopted.items()):
            if not is_node_process(pid, self.config_path, node_id):
                del self.adopted[node_id]
                gone.append((node_id, f"pid {pid}, {describe_exit(wait_exit_record(self.config, node_id, pid))}"))
        return gone

    def adopt_new(self) -> list[str]:
        """Adopts the nodes started since (by `cluster start`); a line for each."""
        lines = []
        for node in self.config.nodes:
            if node.id in self.children or node.id in self.adopted:
                continue
            pid = running_pid(self.config, self.config_path, node.id)
            if pid is not None:
                self.adopted[node.id] = pid
                lines.append(f"node {node.id} is running again (pid {pid}): adopted; log: {log_path(self.config, node.id)}")
        return lines

    def exit_lines(self) -> list[str]:
        return [f"node {node_id} exited ({how}); log: {log_path(self.config, node_id)}" for node_id, how in self.exited()]

    def stop_all(self) -> None:
        """SIGTERM to every node by PID, then SIGKILL to any still running after NODE_STOP_TIMEOUT_S."""
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for pid in self.adopted.values():
            _signal_quietly(pid, signal.SIGTERM)
        deadline = time.monotonic() + NODE_STOP_TIMEOUT_S
        for node_id, child in self.children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"node {node_id} (pid {child.pid}) did not stop in {NODE_STOP_TIMEOUT_S:.0f} s: killing it",
                      file=sys.stderr)
                child.kill()
                child.wait()
            remove_pid(self.config, node_id, child.pid)
        for node_id, pid in self.adopted.items():
            if not _wait_gone(pid, self.config_path, node_id, deadline):
                print(f"node {node_id} (pid {pid}) did not stop in {NODE_STOP_TIMEOUT_S:.0f} s: killing it",
                      file=sys.stderr)
                _signal_quietly(pid, signal.SIGKILL)
                _wait_gone(pid, self.config_path, node_id, time.monotonic() + NODE_KILL_TIMEOUT_S)
        self.children.clear()
        self.adopted.clear()


def _signal_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, config_path: Path, node_id: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if not is_node_process(pid, config_path, node_id):
            return True
        time.sleep(POLL_INTERVAL_S / 2)
    return not is_node_process(pid, config_path, node_id)
