"""`queen-raft cluster stop|kill|start|restart NODE --config FILE`: one node of a local cluster.

They work with or without a running `cluster up`: the node is found through its pid file
(node_pids.py), and a node started here is adopted by a running `cluster up`.

- `start` launches the node detached (its own session, so a closed terminal does not stop it) under
  a small keeper process that records how it exits, with its log in `<data_dir>/logs/<node>.log`.
  It returns once the node answers /health (with or without a leader: a node alone has none).
- `stop` sends SIGTERM and waits for the process to end (SIGKILL after NODE_STOP_TIMEOUT_S, as
  `cluster up` does); `kill` sends SIGKILL and waits until the process is gone, so that a `start`
  right after finds the ports free.
- `restart` is `stop` (when running) then `start`.

Refusals (exit 2, one line, nothing changed): an unknown node id; `start` of a node whose host is
not an address of this machine, of a node that is running (by its pid file, or answering on its
HTTP port without one), or of one whose ports another process holds; `stop` or `kill` of a node
that is not running.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from queen_raft.cli.cluster_health import fetch_health
from queen_raft.cli.node_pids import (describe_exit, is_node_process, launch_lock, log_dir, log_path, node_command,
                                      remove_pid, running_pid, wait_exit_record, write_exit, write_pid)
from queen_raft.config import ClusterConfig, NodeConfig, load_config
from queen_raft.peer_password import ensure_dev_raft_password

# A node that has not exited this long after SIGTERM is killed (it may be stuck on a peer).
NODE_STOP_TIMEOUT_S = 10.0
# A SIGKILLed process is gone within milliseconds; this is room for a loaded machine.
NODE_KILL_TIMEOUT_S = 5.0
# The interpreter and pysyncobj import and the ports bind in ~0.5 s; the rest is a loaded machine.
NODE_START_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
EXIT_REFUSED = 2


class NodeCommandError(Exception):
    """A refused node command: its one-line message, exit 2, nothing changed."""


def prepare_to_launch(config: ClusterConfig) -> None:
    """What every launch of a node of this config needs first: its log directory, and for a dev
    config that names no Raft password, the generated one (peer_password.py)."""
    log_dir(config).mkdir(parents=True, exist_ok=True)
    ensure_dev_raft_password(config)


def host_is_local(host: str) -> bool:
    """Whether this machine can listen on `host` (binding sends nothing on the network)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address[0], 0))
        except OSError as exc:
            return exc.errno != errno.EADDRNOTAVAIL
    return True


def ports_in_use(node: NodeConfig, tenant_count: int) -> list[int]:
    """The node's ports (HTTP, and one Raft port per tenant) that cannot be bound on its host now."""
    busy = []
    for port in [node.http_port, *(node.raft_port + i for i in range(tenant_count))]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As the node binds: a port held only by TIME_WAIT connections of its last run is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((node.host, port))
            except OSError:
                busy.append(port)
    return busy


def check_startable(config: ClusterConfig, config_path: Path, node_id: str) -> None:
    """Raises NodeCommandError when the node runs already or its ports are taken."""
    node = config.node(node_id)
    if not host_is_local(node.host):
        raise NodeCommandError(f"node {node_id}'s host {node.host} is not an address of this machine: "
                               "start it on its own machine")
    pid = running_pid(config, config_path, node_id)
    if pid is not None:
        raise NodeCommandError(f"node {node_id} is already running (pid {pid})")
    _, body = fetch_health(node.http_url)
    if isinstance(body, dict) and body.get("node") == node_id:
        raise NodeCommandError(f"node {node_id} is already running: it answers on {node.http_url} "
                               "(started without queen-raft cluster, so it has no pid file)")
    busy = ports_in_use(node, len(config.tenants))
    if busy:
        raise NodeCommandError(f"node {node_id} cannot start: port(s) {', '.join(map(str, busy))} on {node.host} "
                               "are in use by another process")


def _run_keeper(config: ClusterConfig, config_path: Path, node_id: str, report_fd: int) -> None:
    """In the forked keeper: starts the node, reports its PID, waits for it and records its exit."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # a caller reading our output must see it end when the command returns
        os.dup2(devnull, fd)
    with open(log_path(config, node_id), "ab") as log:
        proc = subprocess.Popen(node_command(config_path, node_id), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    # After the launch, so that the node keeps the default dispositions (an ignored signal is inherited).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A keeper told to stop passes it on: the node is what must stop.
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))
    write_pid(config, node_id, proc.pid)
    os.write(report_fd, f"{proc.pid}\n".encode())
    os.close(report_fd)
    returncode = proc.wait()
    write_exit(config, node_id, proc.pid, returncode)
    remove_pid(config, node_id, proc.pid)


def start_detached(config: ClusterConfig, config_path: Path, node_id: str) -> int:
    """Launches the node under a keeper in its own session; its PID. Refuses as check_startable."""
    prepare_to_launch(config)
    with launch_lock(config, node_id) as lock_fd:
        check_startable(config, config_path, node_id)
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            status = 1
            try:
                os.close(lock_fd)  # the lock is the launcher's: it must not live as long as the keeper
                os.close(read_fd)
                _run_keeper(config, config_path, node_id, write_fd)
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        with os.fdopen(read_fd) as report:
            reported = report.read().strip()
    if not reported:
        raise NodeCommandError(f"node {node_id} could not be launched; see {log_path(config, node_id)}")
    return int(reported)


def wait_answering(config: ClusterConfig, config_path: Path, node_id: str, pid: int,
                   timeout_s: float = NODE_START_TIMEOUT_S) -> str | None:
    """Until the node answers /health as itself; None then, or why it did not."""
    node = config.node(node_id)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, body = fetch_health(node.http_url)
        if isinstance(body, dict) and body.get("node") == node_id:
            return None
        if not is_node_process(pid, config_path, node_id):
            return f"exited while starting: {describe_exit(wait_exit_record(config, node_id, pid))}"
        time.sleep(POLL_INTERVAL_S)
    return f"does not answer on {node.http_url} after {timeout_s:.0f} s"


def wait_gone(pid: int, config_path: Path, node_id: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_node_process(pid, config_path, node_id):
            return True
        time.sleep(POLL_INTERVAL_S)
    return not is_node_process(pid, config_path, node_id)


def signal_node(config: ClusterConfig, config_path: Path, node_id: str, sig: int) -> tuple[int, bool]:
    """Sends `sig` to the running node and waits until it is gone; (its PID, whether it had to be
    killed after ignoring SIGTERM for NODE_STOP_TIMEOUT_S)."""
    config.node(node_id)  # an unknown id is refused before anything else
    pid = running_pid(config, config_path, node_id)
    if pid is None:
        raise NodeCommandError(f"node {node_id} is not running")
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # it ended between the check and the signal
        pass
    timeout = NODE_STOP_TIMEOUT_S if sig == signal.SIGTERM else NODE_KILL_TIMEOUT_S
    forced = not wait_gone(pid, config_path, node_id, timeout)
    if forced:
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid, config_path, node_id, NODE_KILL_TIMEOUT_S)
    remove_pid(config, node_id, pid)  # now, not when its launcher notices: the node is gone
    return pid, forced


def start_and_report(config: ClusterConfig, config_path: Path, node_id: str) -> int:
    pid = start_detached(config, config_path, node_id)
    problem = wait_answering(config, config_path, node_id, pid)
    if problem is not None:
        print(f"node {node_id} (pid {pid}) {problem}; log: {log_path(config, node_id)}", file=sys.stderr)
        return 1
    print(f"node {node_id} started (pid {pid}); log: {log_path(config, node_id)}", flush=True)
    return 0


def stop_and_report(config: ClusterConfig, config_path: Path, node_id: str, sig: int) -> None:
    pid, forced = signal_node(config, config_path, node_id, sig)
    if sig == signal.SIGKILL:
        print(f"node {node_id} killed (pid {pid}, SIGKILL)", flush=True)
    elif forced:
        print(f"node {node_id} (pid {pid}) ignored SIGTERM for {NODE_STOP_TIMEOUT_S:.0f} s: killed", flush=True)
    else:
        print(f"node {node_id} stopped (pid {pid})", flush=True)


def cmd_node_control(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    config_path = Path(args.config)
    try:
        config.node(args.node)
        if args.cluster_command == "start":
            return start_and_report(config, config_path, args.node)
        if args.cluster_command == "restart":
            if running_pid(config, config_path, args.node) is not None:
                stop_and_report(config, config_path, args.node, signal.SIGTERM)
            return start_and_report(config, config_path, args.node)
        sig = signal.SIGKILL if args.cluster_command == "kill" else signal.SIGTERM
        stop_and_report(config, config_path, args.node, sig)
        return 0
    except NodeCommandError as exc:
        print(f"queen-raft: {exc}", file=sys.stderr)
        return EXIT_REFUSED


NODE_COMMAND_HELP = {
    "start": "start one node detached (log in <data_dir>/logs/); a running `cluster up` adopts it",
    "stop": "stop one node: SIGTERM, and wait until it has exited",
    "kill": "kill one node: SIGKILL, and wait until it is gone",
    "restart": "stop one node (if running), then start it detached",
}


def add_node_control_commands(cluster_sub: argparse._SubParsersAction) -> None:
    for name, help_text in NODE_COMMAND_HELP.items():
        command = cluster_sub.add_parser(name, help=help_text, description=help_text)
        command.add_argument("node", metavar="NODE", help="the node's id in the config")
        command.add_argument("--config", type=Path, required=True)
        command.set_defaults(handler=cmd_node_control)
