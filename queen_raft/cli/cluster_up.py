"""`queen-raft cluster up`: start every node, wait for the leaders, print how to use the cluster,
then supervise it (supervisor.py) until Ctrl-C, SIGTERM or SIGHUP."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from queen_raft.cli.cluster_checks import answers_as_ours, log_tail, taken_ports
from queen_raft.cli.cluster_health import cluster_status_lines, fetch_health
from queen_raft.cli.node_control import EXIT_REFUSED, NodeCommandError
from queen_raft.cli.node_pids import log_dir, log_path, running_pid
from queen_raft.cli.supervisor import POLL_INTERVAL_S, Supervisor
from queen_raft.config import ClusterConfig

# `cluster up` waits this long for every node to report a leader in every group: an election is
# ~0.3 s, the interpreter and pysyncobj start in ~0.5 s; the rest is room for a loaded machine.
CLUSTER_READY_TIMEOUT_S = 30.0


def run_cluster(config: ClusterConfig, config_path: Path) -> int:
    supervisor = Supervisor(config, config_path)
    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    # SIGHUP too: a closed terminal must not leave three orphaned nodes holding the ports.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, request_stop)
    refusal = _refuse_taken_ports_of_stopped_nodes(config, config_path)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return EXIT_REFUSED
    try:
        try:
            for line in supervisor.launch_all():
                print(line, flush=True)
        except NodeCommandError as exc:
            supervisor.adopted.clear()  # running before this launch: not this launch's to stop
            print(f"queen-raft: {exc}; the nodes this launch started are stopped", file=sys.stderr)
            return EXIT_REFUSED
        if not _wait_ready(config, supervisor, lambda: stopping):
            return 130 if stopping else 1
        _print_welcome(config, config_path, supervisor)
        while not stopping:
            for line in supervisor.exit_lines() + supervisor.adopt_new():
                print(line, flush=True)
            time.sleep(POLL_INTERVAL_S)
        return 0
    finally:
        print("stopping the cluster...", file=sys.stderr)
        supervisor.stop_all()
        print("stopped.", file=sys.stderr)


def _refuse_taken_ports_of_stopped_nodes(config: ClusterConfig, config_path: Path) -> str | None:
    """The refusal naming each taken port of a node this launch would start (and what holds it);
    a node already running is adopted, its ports are its own."""
    running = {n.id for n in config.nodes if running_pid(config, config_path, n.id) is not None}
    taken = [t for t in taken_ports(config) if t.node_id not in running]
    if not taken:
        return None
    lines = [f"cluster {config.name!r} not started: {len(taken)} of its ports are in use by another process"]
    lines += [t.describe() for t in taken]
    lines.append("stop what holds them (another `cluster up`?) or change the ports in the config")
    return "\n".join(lines)


def _wait_ready(config: ClusterConfig, supervisor: Supervisor, stopping) -> bool:
    """Until every node answers 200 (every group has a leader). False, with the reason printed,
    when a node exits first or the time runs out."""
    deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
    while not stopping():
        dead = supervisor.exited()
        if dead:
            for node_id, how in dead:
                # A bind error or a refusal to start is in the node's log, not on this terminal.
                print(f"node {node_id} exited ({how}); log: {log_path(config, node_id)}\n"
                      f"{node_id} ({how}), the end of its log:\n{log_tail(log_path(config, node_id))}",
                      file=sys.stderr)
            print(f"a node exited while the cluster was starting; see {log_dir(config)}/", file=sys.stderr)
            return False
        # Answered by this node of this cluster: a port held by something else must not read as "up".
        if all(answers_as_ours(*fetch_health(n.http_url), n.id, config.name) for n in config.nodes):
            return True
        if time.monotonic() > deadline:
            print(f"the cluster did not elect every leader within {CLUSTER_READY_TIMEOUT_S:.0f} s; see {log_dir(config)}/",
                  file=sys.stderr)
            for line in cluster_status_lines(config):
                print(line, file=sys.stderr)
            return False
        time.sleep(POLL_INTERVAL_S)
    return False


def _print_welcome(config: ClusterConfig, config_path: Path, supervisor: Supervisor) -> None:
    print(f"cluster {config.name!r} is up ({len(config.nodes)} nodes, logs in {log_dir(config)}/)")
    for node in config.nodes:
        print(f"  {node.id}: {node.http_url}  (pid {supervisor.pid(node.id)})")
    print("tenants and tokens:")
    for tenant in config.tenants:
        print(f"  {tenant.name}")
        for token in tenant.tokens:
            shown = token.plaintext if token.plaintext is not None else f"(sha256 {token.sha256[:12]}...)"
            print(f"    {token.level:<11} {shown}")
    for line in cluster_status_lines(config, config_path):
        print(line)
    first = config.nodes[0]
    example_token = next((t.plaintext for t in config.tenants[0].tokens if t.plaintext and t.level == "read-write"), "<token>")
    print("try:")
    print(f"  curl -s -X POST {first.http_url}/api/v1/timers -H 'Authorization: Bearer {example_token}' "
          "-H 'content-type: application/json' -d '{\"operations\":[{\"op\":\"schedule\",\"queue\":\"reminders\","
          "\"timerKey\":\"k1\",\"delayMs\":2000,\"txn\":\"t1\",\"payload\":\"eyJoaSI6MX0=\"}]}'")
    print(f"  curl -s '{first.http_url}/api/v1/pop/queue/reminders?wait=true&timeout=5000' -H 'Authorization: Bearer {example_token}'")
    print(f"a node that exits leaves the others running; `queen-raft cluster start NODE --config {config_path}` "
          "brings it back (make node-start NODE=...).")
    print("Ctrl-C stops the cluster.", flush=True)
