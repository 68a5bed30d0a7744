"""Long CLI work against a real node: `timer schedule --file` schedules every line, and the long
commands (`timer schedule --file`, `dlq list --all`, `cluster backup`, `cluster restore`) draw
progress on stderr when it is a terminal (a pty here) and print nothing there when it is a pipe,
while stdout keeps the same answer either way."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from cluster_fixture import REPO, NodeCluster, running_cluster, token

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 120
ROWS = 600  # three calls of at most 256
# What tqdm draws and a plain answer never holds: its carriage returns, and a bar's edge when the
# total is known.
BAR_MARKS = ("|", "\r")


def run_cli(*args: str, terminal: bool, stdin: str | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, what reached stderr) of `queen-raft ARGS`; stderr is a pty of 100
    columns when `terminal`, else a pipe. stdout is always a pipe."""
    command = [sys.executable, "-m", "queen_raft", *args]
    if not terminal:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, input=stdin)
        return done.returncode, done.stdout, done.stderr
    leader_fd, follower_fd = pty.openpty()
    fcntl.ioctl(follower_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    with subprocess.Popen(command, cwd=REPO, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=follower_fd, text=True) as process:
        os.close(follower_fd)
        stdout, _ = process.communicate(stdin, timeout=CLI_TIMEOUT_S)
    chunks = []
    while True:
        try:
            chunk = os.read(leader_fd, 65536)
        except OSError:  # EIO: every writer of the pty is gone and it is drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader_fd)
    return process.returncode, stdout, b"".join(chunks).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("progress"), node_count=1) as cluster:
        yield cluster


def client_args(cluster: NodeCluster, level: str = "read-write") -> list[str]:
    return ["--url", cluster.url("n1"), "--token", token("acme", level), "--output", "json"]


def rows_file(path: Path, queue: str, count: int) -> Path:
    lines = [json.dumps({"queue": queue, "timerKey": f"row-{i:04d}", "delay": "1h", "payload": {"n": i}})
             for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def pending_keys(cluster: NodeCluster, queue: str) -> list[str]:
    status, _, body = cluster.call("n1", "GET", f"/api/v1/timers/{queue}?limit=1000", token("acme", "read-only"))
    assert status == 200, body
    assert not body["truncated"]
    return [row["timerKey"] for row in body["rows"]]


def test_schedule_from_a_file_schedules_every_line_quietly_when_piped(node, tmp_path):
    path = rows_file(tmp_path / "rows.jsonl", "bulk-piped", ROWS)
    code, out, err = run_cli("timer", "schedule", "--file", str(path), *client_args(node), terminal=False)
    assert code == 0, err
    assert err == ""
    assert json.loads(out) == {"rows": ROWS, "calls": 3, "scheduled": ROWS, "rescheduled": 0}
    assert pending_keys(node, "bulk-piped") == [f"row-{i:04d}" for i in range(ROWS)]
    # The same file again: every line is an upsert of its key.
    code, out, _ = run_cli("timer", "schedule", "--file", str(path), *client_args(node), terminal=False)
    assert code == 0 and json.loads(out)["rescheduled"] == ROWS


def test_schedule_from_a_file_shows_progress_on_a_terminal(node, tmp_path):
    path = rows_file(tmp_path / "rows.jsonl", "bulk-tty", ROWS)
    code, out, terminal = run_cli("timer", "schedule", "--file", str(path), *client_args(node), terminal=True)
    assert code == 0, terminal
    assert json.loads(out)["scheduled"] == ROWS
    assert "scheduling" in terminal and f"/{ROWS}" in terminal and all(mark in terminal for mark in BAR_MARKS), terminal
    assert len(pending_keys(node, "bulk-tty")) == ROWS


def test_a_bad_line_is_named_and_nothing_is_sent(node, tmp_path):
    path = rows_file(tmp_path / "rows.jsonl", "bulk-bad", 5)
    lines = path.read_text().splitlines()
    lines.insert(3, '{"queue": "bulk-bad", "timerKey": "x", "delay": "1h"}')
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run_cli("timer", "schedule", "--file", str(path), *client_args(node), terminal=False)
    assert code == 2 and out == ""
    assert f"{path} line 4: give exactly one of payload and payloadB64" in err
    assert pending_keys(node, "bulk-bad") == []


def test_stdin_rows_take_the_command_lines_queue(node):
    rows = "".join(json.dumps({"timerKey": f"in-{i}", "delay": "1h", "payloadB64": base64.b64encode(b"x").decode()}) + "\n"
                   for i in range(3))
    code, out, err = run_cli("timer", "schedule", "bulk-stdin", "--file", "-", *client_args(node), terminal=False,
                             stdin=rows)
    assert code == 0, err
    assert json.loads(out)["scheduled"] == 3 and pending_keys(node, "bulk-stdin") == ["in-0", "in-1", "in-2"]


def dead_letter(cluster: NodeCluster, queue: str, count: int) -> None:
    rw = token("acme", "read-write")
    for i in range(count):
        status, _, body = cluster.call("n1", "POST", "/api/v1/push", rw, {"items": [
            {"queue": queue, "payload": {"i": i}, "transactionId": f"{queue}-{i}"}]})
        assert status == 201, body
        status, _, popped = cluster.call("n1", "GET", f"/api/v1/pop/queue/{queue}?batch=1", rw)
        assert status == 200 and popped["messages"], popped
        message = popped["messages"][0]
        status, _, acked = cluster.call("n1", "POST", "/api/v1/ack", rw, {"leaseId": popped["leaseId"], "acknowledgments": [
            {"partition": message["partition"], "offset": message["offset"], "status": "dlq", "error": "poison"}]})
        assert status == 200 and acked["results"][0]["success"], acked


def test_dlq_list_all_shows_progress_on_a_terminal_only(node):
    dead_letter(node, "progress-dlq", 3)
    args = ("dlq", "list", "progress-dlq", "--all", *client_args(node, "read-only"))
    code, piped_out, err = run_cli(*args, terminal=False)
    assert code == 0 and err == ""
    assert len(json.loads(piped_out)["rows"]) == 3
    code, out, terminal = run_cli(*args, terminal=True)
    assert code == 0 and json.loads(out)["rows"] == json.loads(piped_out)["rows"]
    assert "dead letters read" in terminal and "\r" in terminal and " rows" in terminal, terminal


def test_backup_and_restore_show_progress_on_a_terminal_only(node, tmp_path):
    config = str(node.config_path)
    code, piped_out, err = run_cli("cluster", "backup", "--config", config, "--out", str(tmp_path / "piped"),
                                   terminal=False)
    assert code == 0 and err == "", err
    assert "[2/2]" in piped_out and "backup of test written" in piped_out
    code, out, terminal = run_cli("cluster", "backup", "--config", config, "--out", str(tmp_path / "tty"),
                                  terminal=True)
    assert code == 0, terminal
    assert "[2/2]" in out and "backup acme" in terminal and "backup globex" in terminal, terminal
    # Restore into the data dirs of another, stopped cluster of the same tenants.
    target = NodeCluster(tmp_path / "target", node_count=3)
    target.workdir.mkdir(parents=True)
    target.write_config()
    restore = ("cluster", "restore", "--config", str(target.config_path), "--from", str(tmp_path / "tty"))
    code, out, terminal = run_cli(*restore, terminal=True)
    assert code == 0, terminal
    assert "restore of test done" in out
    assert "checking" in terminal and "seeding" in terminal and all(mark in terminal for mark in BAR_MARKS), terminal
    target.data_dir = tmp_path / "target" / "other-data"
    target.write_config()
    code, out, err = run_cli(*restore, terminal=False)
    assert code == 0 and err == "", err
    assert "restore of test done" in out
