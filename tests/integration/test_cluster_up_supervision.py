"""`queen-raft cluster up` outlives its nodes, and `cluster stop|kill|start|restart NODE` work with
it and without it: real node processes, the CLI as a subprocess."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from cluster_cli_fixture import (cli, health, is_node, leaders, node_cli, pid_of, stop_every_node, wait_all_healthy,
                                 wait_for, written_config)
from cluster_fixture import REPO, http_call, token

pytestmark = pytest.mark.integration

# The README's promise: `make cluster-status` names a new leader within 2 s of a kill -9.
FAILOVER_BOUND_S = 2.0
UP_READY_TIMEOUT_S = 40.0
LINE_TIMEOUT_S = 10.0
UP_STOP_TIMEOUT_S = 20.0


class ClusterUp:
    """`cluster up` as a subprocess, its output in a file read as it grows."""

    def __init__(self, cluster, workdir):
        self.output = workdir / "cluster-up.out"
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "queen_raft", "cluster", "up", "--config",
                                          str(cluster.config_path)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_line(self, pattern: str, timeout_s: float = LINE_TIMEOUT_S) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            assert self.proc.poll() is None, f"cluster up exited ({self.proc.returncode}):\n{self.text()}"
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in {timeout_s} s:\n{self.text()}")

    def stop(self, sig: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=UP_STOP_TIMEOUT_S)


def one_line_refusal(done: subprocess.CompletedProcess, words: str) -> None:
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_cluster_up_outlives_a_killed_leader_and_adopts_the_node_started_again(tmp_path):
    cluster = written_config(tmp_path)
    up = ClusterUp(cluster, tmp_path)
    try:
        up.wait_line(r"Ctrl-C stops the cluster", UP_READY_TIMEOUT_S)
        first_pids = {n: pid_of(cluster, n) for n in cluster.node_ids}
        assert all(first_pids.values()), first_pids
        victim = leaders(cluster)["acme"]
        survivors = [n for n in cluster.node_ids if n != victim]

        killed_at = time.monotonic()
        assert node_cli(cluster, "kill", victim).returncode == 0
        new_leader = wait_for(lambda: leaders(cluster, survivors).get("acme"), 10.0, "a new acme leader")
        failover_s = time.monotonic() - killed_at
        up.wait_line(rf"node {victim} exited \(pid {first_pids[victim]}, killed by signal 9 \(SIGKILL\)\); "
                     rf"log: \S+/logs/{victim}\.log")
        assert failover_s <= FAILOVER_BOUND_S, f"no acme leader for {failover_s:.2f} s after the kill"
        status = cli("cluster", "status", "--config", str(cluster.config_path))
        assert re.search(rf"^{victim}\s+-\s+\(no answer .*not running\)", status.stdout, re.M), status.stdout
        assert re.search(rf"^{new_leader}\s+\d+\s+acme\s+leader\s+{new_leader} ", status.stdout, re.M), status.stdout

        # the cluster serves through a survivor meanwhile
        scheduled = http_call(f"{cluster.url(survivors[0])}/api/v1/timers", "POST", token("acme", "read-write"), {
            "operations": [{"op": "schedule", "queue": "walkthrough", "timerKey": "k1", "delayMs": 3_600_000,
                            "txn": "t1", "payload": "eyJoaSI6MX0="}]})
        assert scheduled[0] == 200 and scheduled[2]["results"][0]["ok"], scheduled

        one_line_refusal(node_cli(cluster, "start", "n9"), "no node with id 'n9'")
        one_line_refusal(node_cli(cluster, "start", survivors[0]), f"node {survivors[0]} is already running")
        assert node_cli(cluster, "start", victim).returncode == 0
        second_pid = pid_of(cluster, victim)
        up.wait_line(rf"node {victim} is running again \(pid {second_pid}\): adopted")
        commit = max(health(cluster, n)[1]["groups"]["acme"]["commitIndex"] for n in survivors)
        wait_for(lambda: (health(cluster, victim)[1] or {}).get("groups", {}).get("acme", {}).get("appliedIndex", -1) >= commit,
                 15.0, f"{victim} applies up to the commit index {commit}")
        status = cli("cluster", "status", "--config", str(cluster.config_path))
        assert re.search(rf"^{victim}\s+{second_pid}\s+acme\s+", status.stdout, re.M), status.stdout

        # a node started by `cluster start` runs under a keeper that reports how it ended
        assert node_cli(cluster, "kill", victim).returncode == 0
        up.wait_line(rf"node {victim} exited \(pid {second_pid}, killed by signal 9 \(SIGKILL\)\)")
        assert node_cli(cluster, "start", victim).returncode == 0
        third_pid = pid_of(cluster, victim)
        up.wait_line(rf"node {victim} is running again \(pid {third_pid}\): adopted")
        assert up.proc.poll() is None

        assert up.stop(signal.SIGINT) == 0
        running = {n: p for n, p in {**first_pids, victim: third_pid}.items() if is_node(cluster, p, n)}
        assert running == {}, f"still running after Ctrl-C: {running}\n{up.text()}"
        assert not list((cluster.data_dir / "run").glob("*.pid"))
    finally:
        up.stop(signal.SIGINT)
        stop_every_node(cluster)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_cluster_up_stops_every_node_on_sigterm_and_sighup(tmp_path, sig):
    cluster = written_config(tmp_path, node_count=1)
    up = ClusterUp(cluster, tmp_path)
    try:
        up.wait_line(r"Ctrl-C stops the cluster", UP_READY_TIMEOUT_S)
        pid = pid_of(cluster, "n1")
        assert pid is not None and is_node(cluster, pid, "n1")
        assert up.stop(sig) == 0
        assert not is_node(cluster, pid, "n1")
    finally:
        up.stop(signal.SIGINT)
        stop_every_node(cluster)


def test_refusals_change_nothing_and_stale_pid_files_are_not_signalled(tmp_path):
    cluster = written_config(tmp_path)
    for command in ("start", "stop", "kill", "restart"):
        one_line_refusal(node_cli(cluster, command, "n9"), "no node with id 'n9'")
    one_line_refusal(node_cli(cluster, "stop", "n1"), "node n1 is not running")

    # a pid file left behind, naming a live process that is not the node (this test's own)
    run_dir = cluster.data_dir / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "n1.pid").write_text(f"{os.getpid()}\n")
    one_line_refusal(node_cli(cluster, "kill", "n1"), "node n1 is not running")
    assert not (run_dir / "n1.pid").exists()

    # another process holds n1's HTTP port: neither `cluster start` nor `cluster up` starts anything
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", cluster.http_ports["n1"]))
        one_line_refusal(node_cli(cluster, "start", "n1"), f"port(s) {cluster.http_ports['n1']} on 127.0.0.1 are in use")
        refused = cli("cluster", "up", "--config", str(cluster.config_path))
        assert refused.returncode == 2, refused.stderr
        assert "in use by another process" in refused.stderr
    assert not list(run_dir.glob("*.pid"))
    assert all(health(cluster, n)[0] == 0 for n in cluster.node_ids)


def test_restart_without_cluster_up_and_start_after_stop(tmp_path):
    cluster = written_config(tmp_path, node_count=1)
    try:
        started = node_cli(cluster, "start", "n1")
        assert started.returncode == 0, started.stderr
        first = pid_of(cluster, "n1")
        assert f"node n1 started (pid {first})" in started.stdout
        restarted = node_cli(cluster, "restart", "n1")
        assert restarted.returncode == 0, restarted.stderr
        second = pid_of(cluster, "n1")
        assert second != first and not is_node(cluster, first, "n1") and is_node(cluster, second, "n1")
        wait_all_healthy(cluster)
        stopped = node_cli(cluster, "stop", "n1")
        assert (stopped.returncode, stopped.stdout.strip()) == (0, f"node n1 stopped (pid {second})")
        assert not is_node(cluster, second, "n1")  # `stop` returns once the process is gone
        assert pid_of(cluster, "n1") is None
    finally:
        stop_every_node(cluster)
