"""`queen-raft cluster restart-all --config FILE`: a rolling restart of the nodes on this machine.

One node at a time: stop it (SIGTERM, waited for), start it detached as `cluster start` does (a
running `cluster up` adopts it), then wait until
1. it answers /health 200 as itself;
2. in every group its applied index has reached the commit index that the group's leader reported
   once the node was back: it holds everything committed while it was away;
3. every node answers 200 and all name the same leader in each group.
Only then the next node. Two of three nodes keep serving throughout; a group whose leader is the
node being restarted is without a leader for one election (measured in docs/operations.md).

Order: each step takes, among the nodes not yet restarted, the one that leads the fewest groups,
so followers go first and leadership moves as little as it can.

A tenant appended to the config (docs/operations.md, "Adding a tenant") is new to the running
nodes: no node reports its group before the first step. Its group can elect a leader only once a
majority of the nodes run the new config, so until then a restarted node answers 503 `settling`
for that group alone, and that is accepted; from the step that completes the majority on, the new
group must have a leader like every other. A config whose existing tenants are not the first ones
of its list (a tenant inserted or the list reordered, which would move groups to other Raft ports)
is refused before anything is restarted.

Refusals (exit 1, nothing restarted): a node that does not answer 200 before the first step
(restarting another could leave a group without a majority), and a node with no pid file here (it
was not started by `queen-raft cluster`, or runs on another machine: restart it where it runs).
A node that is not healthy and caught up within RESTART_STEP_TIMEOUT_S stops the restart there
(exit 1); the nodes after it are left as they are.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from queen_raft.cli.cluster_health import fetch_health
from queen_raft.cli.node_control import (NodeCommandError, signal_node, start_detached, wait_answering)
from queen_raft.cli.node_pids import log_path, running_pid
from queen_raft.config import ClusterConfig, load_config

# Start (~1 s), catching up on what was committed meanwhile, and an election if it led a group;
# generous for a loaded machine or a long log to replay.
RESTART_STEP_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.05


class RestartFailed(Exception):
    pass


def _answers(config: ClusterConfig) -> dict[str, tuple[int, dict | None]]:
    return {node.id: fetch_health(node.http_url) for node in config.nodes}


def _groups_led(body: dict | None) -> int:
    groups = (body or {}).get("groups", {})
    return sum(1 for group in groups.values() if group.get("role") == "leader")


def _leader_commits(answers: dict[str, tuple[int, dict | None]]) -> dict[str, int]:
    """Per tenant, the commit index its leader reports (tenants with no leader answering are absent)."""
    commits = {}
    for _, body in answers.values():
        for tenant, group in (body or {}).get("groups", {}).items():
            if group.get("role") == "leader" and isinstance(group.get("commitIndex"), int):
                commits[tenant] = group["commitIndex"]
    return commits


def _answers_well(node_id: str, status: int, body: dict | None, required: set[str]) -> bool:
    """Answers as itself, healthy, or only `settling` for groups it is not yet required to lead."""
    if not body or body.get("node") != node_id:
        return False
    if status == 200:
        return True
    groups = body.get("groups", {})
    return status == 503 and body.get("status") == "settling" and all(
        group.get("problem") is None and (group.get("leader") or tenant not in required)
        for tenant, group in groups.items())


def _settled(config: ClusterConfig, answers: dict[str, tuple[int, dict | None]], required: set[str]) -> bool:
    """Every node answers well, and in each required group all nodes that run it name one leader."""
    if not all(_answers_well(node_id, status, body, required) for node_id, (status, body) in answers.items()):
        return False
    for tenant in required:
        named = {body["groups"][tenant].get("leader") for _, body in answers.values() if tenant in body["groups"]}
        if len(named) != 1 or None in named:
            return False
    return True


def tenants_running(config: ClusterConfig, answers: dict[str, tuple[int, dict | None]]) -> list[str]:
    """The config's tenants that some node already runs; refuses a config that does not list them
    first (a new tenant must be appended: the i-th tenant's group listens on raft_port + i)."""
    running = {tenant for _, body in answers.values() for tenant in (body or {}).get("groups", {})}
    names = [tenant.name for tenant in config.tenants]
    known = [name for name in names if name in running]
    if names[:len(known)] != known:
        raise RestartFailed(f"the config lists tenant(s) {', '.join(n for n in names[:len(known)] if n not in running)} "
                            "before tenants the nodes already run: append new tenants at the end of [[tenants]] "
                            "(the i-th tenant's group listens on raft_port + i)")
    return known


def wait_caught_up(config: ClusterConfig, node_id: str, required: set[str] | None = None,
                   timeout_s: float = RESTART_STEP_TIMEOUT_S) -> str:
    """Steps 2 and 3 of the module docstring for the restarted node, in the `required` groups
    (every tenant of the config by default); what it reached, as text."""
    required = {tenant.name for tenant in config.tenants} if required is None else required
    deadline = time.monotonic() + timeout_s
    targets: dict[str, int] = {}
    while time.monotonic() < deadline:
        answers = _answers(config)
        status, body = answers[node_id]
        if _answers_well(node_id, status, body, required):
            if len(targets) < len(required):
                # The first commit seen per group stays the target.
                targets = {**{t: c for t, c in _leader_commits(answers).items() if t in required}, **targets}
            applied = {t: body["groups"][t].get("appliedIndex") for t in targets}
            caught_up = len(targets) == len(required) and all(
                isinstance(applied[t], int) and applied[t] >= targets[t] for t in targets)
            if caught_up and _settled(config, answers, required):
                return ", ".join(f"{t} applied {applied[t]} >= {targets[t]}" for t in sorted(targets))
        time.sleep(POLL_INTERVAL_S)
    raise RestartFailed(f"node {node_id} is not healthy and caught up after {timeout_s:.0f} s; "
                        f"see {log_path(config, node_id)} and `queen-raft cluster status`")


def _check_can_begin(config: ClusterConfig, config_path: Path) -> dict[str, tuple[int, dict | None]]:
    for node in config.nodes:
        if running_pid(config, config_path, node.id) is None:
            raise RestartFailed(f"node {node.id} has no running process under its pid file on this machine "
                                "(start it with `queen-raft cluster start`, or restart it where it runs)")
    answers = _answers(config)
    unhealthy = [node_id for node_id, (status, _) in answers.items() if status != 200]
    if unhealthy:
        raise RestartFailed(f"node(s) {', '.join(unhealthy)} do not answer /health 200: fix the cluster before "
                            "a rolling restart (restarting another node could leave a group without a majority)")
    return answers


def restart_one(config: ClusterConfig, config_path: Path, node_id: str, required: set[str] | None = None) -> None:
    began = time.monotonic()
    old_pid, forced = signal_node(config, config_path, node_id, signal.SIGTERM)
    stopped_in = time.monotonic() - began
    new_pid = start_detached(config, config_path, node_id)
    problem = wait_answering(config, config_path, node_id, new_pid)
    if problem is not None:
        raise RestartFailed(f"node {node_id} (pid {new_pid}) {problem}; log: {log_path(config, node_id)}")
    reached = wait_caught_up(config, node_id, required)
    how = "killed after ignoring SIGTERM" if forced else "stopped"
    print(f"{node_id}: {how} (pid {old_pid}) in {stopped_in:.1f} s, started (pid {new_pid}), healthy and caught up "
          f"{time.monotonic() - began:.1f} s after the stop ({reached})", flush=True)


def restart_all(config: ClusterConfig, config_path: Path) -> None:
    began = time.monotonic()
    answers = _check_can_begin(config, config_path)
    known = tenants_running(config, answers)
    new = [tenant.name for tenant in config.tenants if tenant.name not in known]
    if new:
        print(f"new tenant(s) {', '.join(new)}: each group elects a leader once a majority of the nodes runs "
              "this config", flush=True)
    majority = len(config.nodes) // 2 + 1
    remaining = [node.id for node in config.nodes]
    while remaining:
        node_id = min(remaining, key=lambda n: _groups_led(answers[n][1]))  # min keeps config order on ties
        restarted = len(config.nodes) - len(remaining) + 1
        required = set(known) | (set(new) if restarted >= majority else set())
        restart_one(config, config_path, node_id, required)
        remaining.remove(node_id)
        answers = _answers(config)
    print(f"restart-all: {len(config.nodes)} node(s) restarted one at a time in {time.monotonic() - began:.1f} s",
          flush=True)


def cmd_restart_all(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        restart_all(config, Path(args.config))
    except (RestartFailed, NodeCommandError) as exc:
        print(f"queen-raft: restart-all stopped: {exc}", file=sys.stderr)
        return 1
    return 0


def add_rolling_restart_command(cluster_sub: argparse._SubParsersAction) -> None:
    help_text = ("restart every node of this machine one at a time, each healthy and caught up, with every "
                 "group led, before the next")
    command = cluster_sub.add_parser("restart-all", help=help_text, description=help_text)
    command.add_argument("--config", type=Path, required=True)
    command.set_defaults(handler=cmd_restart_all)
