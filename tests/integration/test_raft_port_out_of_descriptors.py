"""A node whose Raft port is flooded while its open-file limit is nearly reached keeps listening.

pysyncobj's stock listener unbinds on an EMFILE from accept and is never bound again: the node
stays deaf to every peer that dials it. Here the node every other node dials (pysyncobj: the one
with the smallest address) gets an RLIMIT_NOFILE just above what it holds (prlimit) and a flood
of connections to its Raft port. After the flood, the dialling node is restarted and the third one
stopped: the two left can elect and commit only if the flooded node accepts the restarted one.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_fixture import own_node_cluster, token  # noqa: E402,F401  (pytest fixture, imported by name)

TENANT = "acme"  # tenant index 0: its group listens on each node's raft_port
FLOOD_CONNECTIONS = 200
# Descriptors the flooded node may open beyond what it holds when the limit is set.
SPARE_DESCRIPTORS = 8
FLOOD_TIMEOUT_S = 20.0
RECOVERY_TIMEOUT_S = 40.0
POLL_S = 0.1


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def raft_address_key(cluster, node_id: str) -> str:
    return f"127.0.0.1:{cluster.raft_ports[node_id]}"


def flood(port: int) -> list[socket.socket]:
    sockets = []
    for _ in range(FLOOD_CONNECTIONS):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        sockets.append(sock)
    return sockets


def kv_put_succeeds(cluster, node_id: str, key: str) -> bool:
    try:
        status, _, _ = cluster.call(node_id, "POST", "/api/v1/kv", token(TENANT, "read-write"),
                                    {"ops": [{"op": "put", "ns": "emfile", "key": key, "value": "v"}]})
    except OSError:
        return False
    return status == 200


def test_the_raft_port_survives_running_out_of_descriptors(own_node_cluster):
    cluster = own_node_cluster
    # The node with the smallest Raft address is dialled by the others and dials no one.
    flooded, dialler, third = sorted(cluster.node_ids, key=lambda n: raft_address_key(cluster, n))
    pid = cluster.processes[flooded].pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    limit = fd_count(pid) + SPARE_DESCRIPTORS
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
    sockets = flood(cluster.raft_ports[flooded])
    try:
        deadline = time.monotonic() + FLOOD_TIMEOUT_S
        # Every descriptor taken (stock code then closes its listener: one fewer).
        while fd_count(pid) < limit - 1:
            assert time.monotonic() < deadline, f"the node holds {fd_count(pid)} of {limit} descriptors"
            time.sleep(POLL_S)
        kept_flooding_until = time.monotonic() + 1.0  # more accepts fail while the flood waits
        while time.monotonic() < kept_flooding_until:
            assert cluster.running(flooded), cluster.log_tail(flooded)
            time.sleep(POLL_S)
    finally:
        for sock in sockets:
            sock.close()
    # The limit stays lowered: the node must recover within it once the flood is gone.
    try:
        cluster.stop_node(third)
        cluster.stop_node(dialler, signal.SIGKILL)
        cluster.start_node(dialler)
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        writes = 0
        while not kv_put_succeeds(cluster, dialler, f"after-flood-{writes}"):
            writes += 1
            assert time.monotonic() < deadline, (
                f"no commit with {flooded} and the restarted {dialler} in {RECOVERY_TIMEOUT_S} s\n"
                + cluster.log_tail(flooded) + "\n" + cluster.log_tail(dialler))
            time.sleep(POLL_S)
        assert kv_put_succeeds(cluster, flooded, "through-the-flooded-node")
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        for node_id in (dialler, third):
            if not cluster.running(node_id):
                cluster.start_node(node_id)
        cluster.wait_ready()
