"""Pid files of `queen-raft cluster` (queen_raft/cli/node_pids.py): a PID is believed only while it
is alive and runs that node of that config."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from queen_raft.cli.node_control import NodeCommandError, check_startable
from queen_raft.cli.node_pids import describe_exit, is_node_process, running_pid, write_pid
from queen_raft.config import parse_config

# A fresh process shows an empty command line in some of these (its exec is finishing).
SPAWNS = 20


def config_for(tmp_path: Path):
    return parse_config({
        "cluster": {"name": "t", "data_dir": str(tmp_path / "data")},
        "nodes": [{"id": "n1", "host": "127.0.0.1", "http_port": 20001, "raft_port": 20002}],
        "tenants": [{"name": "acme", "tokens": [{"token": "t", "level": "admin"}]}],
    }, env={})


def look_alike(config_path: Path, node_id: str, seconds: float = 5.0) -> subprocess.Popen:
    """A process whose command line reads as `queen_raft node --config PATH --id NODE`."""
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})", "-m", "queen_raft", "node",
                             "--config", str(config_path), "--id", node_id])


def test_a_node_is_recognised_right_after_it_is_spawned(tmp_path):
    config_path = tmp_path / "c.toml"
    missed = 0
    for _ in range(SPAWNS):
        proc = look_alike(config_path, "n1")
        try:
            missed += not is_node_process(proc.pid, config_path, "n1")
        finally:
            proc.kill()
            proc.wait()
    assert missed == 0, f"{missed} of {SPAWNS} fresh node processes were taken for dead"


def test_another_node_another_config_a_zombie_and_a_reaped_pid_are_not_the_node(tmp_path):
    config_path = tmp_path / "c.toml"
    proc = look_alike(config_path, "n1")
    try:
        assert is_node_process(proc.pid, config_path, "n1")
        assert not is_node_process(proc.pid, config_path, "n2")
        assert not is_node_process(proc.pid, tmp_path / "other.toml", "n1")
        assert not is_node_process(os.getpid(), config_path, "n1")
    finally:
        proc.kill()
    deadline = time.monotonic() + 5
    while is_node_process(proc.pid, config_path, "n1") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not is_node_process(proc.pid, config_path, "n1")  # a zombie: dead, not yet reaped
    proc.wait()
    assert not is_node_process(proc.pid, config_path, "n1")


def test_a_stale_pid_file_is_removed_and_a_live_one_kept(tmp_path):
    config, config_path = config_for(tmp_path), tmp_path / "c.toml"
    write_pid(config, "n1", os.getpid())  # alive, but not the node
    assert running_pid(config, config_path, "n1") is None
    assert not (config.data_dir / "run" / "n1.pid").exists()
    proc = look_alike(config_path, "n1")
    try:
        write_pid(config, "n1", proc.pid)
        assert running_pid(config, config_path, "n1") == proc.pid
        assert (config.data_dir / "run" / "n1.pid").exists()
    finally:
        proc.kill()
        proc.wait()


def test_exit_descriptions():
    assert describe_exit(0) == "exit status 0"
    assert describe_exit(65) == "exit status 65"
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(None) == "exit status unknown"


def test_a_node_of_another_machine_is_not_started_here(tmp_path):
    config = parse_config({
        "cluster": {"name": "t", "data_dir": str(tmp_path / "data")},
        # 192.0.2.0/24 is TEST-NET-1: no machine has it; binding to it sends nothing
        "nodes": [{"id": "n1", "host": "192.0.2.1", "http_port": 20001, "raft_port": 20002}],
        "tenants": [{"name": "acme", "tokens": [{"token_sha256": "0" * 64, "level": "admin"}]}],
        "settings": {"raft_password": "pw"},
    }, env={})
    with pytest.raises(NodeCommandError, match="host 192.0.2.1 is not an address of this machine"):
        check_startable(config, tmp_path / "c.toml", "n1")
