"""What `cluster up` checks so that it never reports another cluster as its own: every port its
nodes will bind is free before anything starts (else it names the port and the process holding it),
"up" means each of its nodes answers /health with its own node id and cluster name, and a node that
exits has the end of its log (where a bind error is) shown."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from queen_raft.config import ClusterConfig

# TCP states in /proc/net/tcp: 0A is LISTEN.
LISTEN = "0A"
LOG_TAIL_LINES = 8


@dataclass(frozen=True)
class TakenPort:
    node_id: str
    what: str  # "HTTP" or "Raft (tenant acme)"
    host: str
    port: int
    holder: str | None  # "pid 123: python -m ..." when this user may see it

    def describe(self) -> str:
        held = f" by {self.holder}" if self.holder else " (the holder is not visible to this user)"
        return f"  {self.node_id} {self.what}: {self.host}:{self.port} is in use{held}"


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int) -> str | None:
    """The process listening on the port, from /proc (Linux; None elsewhere or when not visible)."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"pid {pid}: {cmdline.strip()[:120]}"
        except OSError:  # a process that ended, or one of another user
            continue
    return None


def taken_ports(config: ClusterConfig) -> list[TakenPort]:
    taken = []
    for node in config.nodes:
        wanted = [("HTTP", node.http_port)] + [(f"Raft (tenant {t.name})", node.raft_port + t.index)
                                               for t in config.tenants]
        for what, port in wanted:
            if not port_free(node.host, port):
                taken.append(TakenPort(node.id, what, node.host, port, port_holder(port)))
    return taken


def answers_as_ours(status: int, body: dict | None, node_id: str, cluster_name: str) -> bool:
    """A healthy /health from this node of this cluster, not from whatever else holds the port."""
    return (status == 200 and isinstance(body, dict) and body.get("node") == node_id
            and body.get("cluster") == cluster_name)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"  (no log at {path})"
    return "\n".join(f"  | {line}" for line in text[-lines:])
