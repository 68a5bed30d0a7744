"""One node of a run as a process on 127.0.0.1: the ports it is given (picked below the kernel's
ephemeral range, held together so no two are the same), the command that runs it, and the process
currently running it. cluster.py starts, signals and restarts these.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
# Where the harness picks its nodes' and proxies' ports: below Linux's ephemeral range (32768-60999
# by default; see free_ports), and apart from the 17xxx blocks fixed test configs use.
PORT_RANGE = (20_000, 32_000)


def free_ports(count: int, attempts: int = 500) -> list[int]:
    """Free ports below the kernel's ephemeral range, held open together so no two are the same.

    Not bind(0): the kernel answers from its ephemeral range (net.ipv4.ip_local_port_range), and a
    port from there can be handed to any outgoing connection (a proxy's, a client's, another
    node's) while the node that owns it is down, so the node cannot bind it again when it restarts
    until that connection closes: the run would judge the node, not the harness's port."""
    sockets = []
    try:
        for _ in range(attempts):
            if len(sockets) == count:
                return [sock.getsockname()[1] for sock in sockets]
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((HOST, random.randrange(*PORT_RANGE)))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        raise RuntimeError(f"no {count} free ports found in {PORT_RANGE} in {attempts} attempts")
    finally:
        for sock in sockets:
            sock.close()


def free_port_block(size: int, attempts: int = 50, taken: frozenset[int] = frozenset()) -> int:
    """A base port with `size` consecutive free ports (tenant i's Raft port is raft_port + i), none
    of them in `taken`: ports picked earlier for this cluster are closed again until the nodes bind
    them, so a later pick may choose one again."""
    for _ in range(attempts):
        base = free_ports(1)[0]
        if base + size >= 65535 or taken.intersection(range(base, base + size)):
            continue
        held = []
        try:
            for port in range(base, base + size):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind((HOST, port))
                held.append(sock)
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no block of {size} free ports found in {attempts} attempts")


def node_command() -> list[str]:
    """The node's CLI, run by this interpreter so the venv that runs the harness runs the nodes."""
    return [sys.executable, "-m", "queen_raft"]


def with_tree_first(environment: dict[str, str], tree: Path) -> dict[str, str]:
    """`environment` with `tree` first on PYTHONPATH. A node runs in its run's directory, where
    `-m queen_raft` would find the package the venv installed, which may be another checkout's (an
    editable install): the nodes must run the code of the tree whose harness judges them."""
    rest = environment.get("PYTHONPATH")
    return {**environment, "PYTHONPATH": str(tree) + (os.pathsep + rest if rest else "")}


@dataclass
class NodeProcess:
    """One node: its ports, its data, and the process currently running it (if any)."""

    id: str
    http_port: int
    raft_port: int
    log_path: Path
    process: subprocess.Popen | None = None
    paused: bool = False
    clock_offset_ms: int = 0  # given at start (QUEEN_TEST_CLOCK_OFFSET_MS); a restart sets it anew
    runtime_clock_offset_ms: int | None = None  # set through the clock route; a restart drops it
    starts: int = 0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def raft_address(self) -> str:
        return f"{HOST}:{self.raft_port}"

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None
