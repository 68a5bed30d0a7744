"""`queen-raft node`, `queen-raft cluster up` and `queen-raft cluster status`: the commands that run
nodes from a cluster config and report on them, rather than call the API of a running cluster."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from queen_raft.cli.cluster_checks import answers_as_ours, log_tail, refuse_taken_ports
from queen_raft.config import ClusterConfig, load_config

# `cluster up` waits this long for every node to report a leader in every group: an election is
# ~0.3 s, the interpreter and pysyncobj start in ~0.5 s; the rest is room for a loaded machine.
CLUSTER_READY_TIMEOUT_S = 30.0
# After SIGTERM, a node that has not exited within this is killed (it may be stuck on a peer).
NODE_STOP_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 2.0
POLL_INTERVAL_S = 0.1


def fetch_health(url: str) -> tuple[int, dict | None]:
    """(HTTP status, body) of GET /health; (0, None) when the node does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=HEALTH_TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, None
    except (OSError, ValueError):
        return 0, None


def cluster_status_lines(config: ClusterConfig) -> list[str]:
    lines = [f"{'node':<6} {'tenant':<16} {'role':<10} {'leader':<28} {'term':>6} {'commit':>8} {'applied':>8}"]
    # /health names a leader by its Raft address; say which node that is.
    node_by_raft_addr = {n.raft_addr(t.index): n.id for n in config.nodes for t in config.tenants}
    for node in config.nodes:
        status, body = fetch_health(node.http_url)
        if body is None:
            lines.append(f"{node.id:<6} (no answer from {node.http_url})")
            continue
        for tenant, group in body.get("groups", {}).items():
            leader = group.get("leader")
            leader_text = f"{node_by_raft_addr.get(leader, '?')} ({leader})" if leader else "-"
            lines.append(
                f"{node.id:<6} {tenant:<16} {str(group.get('role')):<10} {leader_text:<28} "
                f"{group.get('term')!s:>6} {group.get('commitIndex')!s:>8} {group.get('appliedIndex')!s:>8}"
            )
    return lines


def cmd_node(args: argparse.Namespace) -> int:
    from queen_raft.node import run_node  # imports pysyncobj: only the node needs it

    config = load_config(args.config)
    run_node(config, args.id)
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    for line in cluster_status_lines(config):
        print(line)
    healthy = all(fetch_health(n.http_url)[0] == 200 for n in config.nodes)
    return 0 if healthy else 1


def _stop_processes(processes: dict[str, subprocess.Popen]) -> None:
    for proc in processes.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + NODE_STOP_TIMEOUT_S
    for node_id, proc in processes.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"node {node_id} (pid {proc.pid}) did not stop in {NODE_STOP_TIMEOUT_S} s: killing it", file=sys.stderr)
            proc.kill()
            proc.wait()


def cmd_cluster_up(args: argparse.Namespace) -> int:
    """Starts every node of the config, waits until every group has a leader, prints how to use
    it, and stops the nodes (by PID) on Ctrl-C, SIGTERM or SIGHUP."""
    config = load_config(args.config)
    if (refusal := refuse_taken_ports(config)) is not None:
        print(refusal, file=sys.stderr)
        return 1
    log_dir = config.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    processes: dict[str, subprocess.Popen] = {}
    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    # SIGHUP too: a closed terminal must not leave three orphaned nodes holding the ports.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, request_stop)
    try:
        for node in config.nodes:
            log_file = open(log_dir / f"{node.id}.log", "ab")
            processes[node.id] = subprocess.Popen(
                [sys.executable, "-m", "queen_raft", "node", "--config", str(args.config), "--id", node.id],
                stdout=log_file, stderr=subprocess.STDOUT,
                # Own process group: the terminal's Ctrl-C reaches this launcher, which stops the
                # nodes in order, instead of every node at once.
                start_new_session=True,
            )
            log_file.close()
        deadline = time.monotonic() + CLUSTER_READY_TIMEOUT_S
        while not stopping:
            dead = [nid for nid, p in processes.items() if p.poll() is not None]
            if dead:
                print(f"node(s) {', '.join(dead)} exited; see {log_dir}/", file=sys.stderr)
                for nid in dead:
                    print(f"{nid} (exit {processes[nid].returncode}), the end of its log:\n"
                          f"{log_tail(log_dir / f'{nid}.log')}", file=sys.stderr)
                return 1
            if all(answers_as_ours(*fetch_health(n.http_url), n.id, config.name) for n in config.nodes):
                break
            if time.monotonic() > deadline:
                print(f"the cluster did not elect every leader within {CLUSTER_READY_TIMEOUT_S} s; see {log_dir}/", file=sys.stderr)
                for line in cluster_status_lines(config):
                    print(line, file=sys.stderr)
                return 1
            time.sleep(POLL_INTERVAL_S)
        if stopping:
            return 130
        print(f"cluster {config.name!r} is up ({len(config.nodes)} nodes, logs in {log_dir}/)")
        for node in config.nodes:
            print(f"  {node.id}: {node.http_url}  (pid {processes[node.id].pid})")
        print("tenants and tokens:")
        for tenant in config.tenants:
            print(f"  {tenant.name}")
            for token in tenant.tokens:
                shown = token.plaintext if token.plaintext is not None else f"(sha256 {token.sha256[:12]}...)"
                print(f"    {token.level:<11} {shown}")
        for line in cluster_status_lines(config):
            print(line)
        first = config.nodes[0]
        example_token = next((t.plaintext for t in config.tenants[0].tokens if t.plaintext and t.level == "read-write"), "<token>")
        print("try:")
        print(f"  curl -s -X POST {first.http_url}/api/v1/timers -H 'Authorization: Bearer {example_token}' "
              "-H 'content-type: application/json' -d '{\"operations\":[{\"op\":\"schedule\",\"queue\":\"reminders\","
              "\"timerKey\":\"k1\",\"delayMs\":2000,\"txn\":\"t1\",\"payload\":\"eyJoaSI6MX0=\"}]}'")
        print(f"  curl -s '{first.http_url}/api/v1/pop/queue/reminders?wait=true&timeout=5000' -H 'Authorization: Bearer {example_token}'")
        print("Ctrl-C stops the cluster.", flush=True)
        while not stopping:
            dead = [nid for nid, p in processes.items() if p.poll() is not None]
            if dead:
                print(f"node(s) {', '.join(dead)} exited; see {log_dir}/; stopping the others", file=sys.stderr)
                return 1
            time.sleep(POLL_INTERVAL_S)
        return 0
    finally:
        print("stopping the cluster...", file=sys.stderr)
        _stop_processes(processes)
        print("stopped.", file=sys.stderr)


def add_cluster_commands(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="run one node: every tenant group and the HTTP API")
    node.add_argument("--config", type=Path, default=None, help="cluster TOML (default: cluster_configs/single.toml)")
    node.add_argument("--id", default=None, help="this node's id in the config (default: the only node)")
    node.set_defaults(handler=cmd_node)
    cluster = sub.add_parser("cluster", help="operate a whole cluster from its config")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", help="start every node, wait for leaders, stop all on Ctrl-C")
    up.add_argument("--config", type=Path, required=True)
    up.set_defaults(handler=cmd_cluster_up)
    status = cluster_sub.add_parser("status", help="each group's leader, term, commit and applied index")
    status.add_argument("--config", type=Path, required=True)
    status.set_defaults(handler=cmd_cluster_status)
