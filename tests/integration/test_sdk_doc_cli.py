"""Every CLI line of docs/sdk.md runs, in the page's order, against a real three-node cluster.

The page's lines are a walk-through: the schedule a later cancel removes, the pop whose lease a
later ack settles. The test runs them as a reader would, with the few things a reader brings
(the payload file, the leaseId a pop printed, an admin token, what a `--file -` line reads) filled in, and holds each line to
what the page says of it: exit 0, or the exit status its comment names.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_fixture import REPO, node_cluster, token  # noqa: F401  (node_cluster is a fixture)

pytestmark = pytest.mark.integration

PAGE = REPO / "docs" / "sdk.md"
PIPED = re.compile(r"^echo '(?P<stdin>[^']*)' \| (?P<command>queen-raft .*)$")
EXIT_IN_COMMENT = re.compile(r"#.*\bexit (?P<code>\d)\b")


def page_lines() -> list[tuple[str, str | None, int]]:
    """(command line, stdin or None, expected exit status) for each CLI line of the page."""
    lines = []
    for text in PAGE.read_text().splitlines():
        stdin = None
        piped = PIPED.match(text)
        if piped:
            stdin, text = piped["stdin"], piped["command"]
        if not text.startswith("queen-raft "):
            continue
        expected = EXIT_IN_COMMENT.search(text)
        lines.append((text, stdin, int(expected["code"]) if expected else 0))
    return lines


LINES = page_lines()


def test_the_page_has_the_lines_this_test_runs():
    commands = {" ".join(shlex.split(line, comments=True)[1:3]) for line, _, _ in LINES}
    assert len(LINES) >= 29
    assert {"timer schedule", "timer cancel", "pop reminders", "transaction --file", "lease extend",
            "dlq replay", "admin pause", "kv put"} <= commands
    assert any(stdin for _, stdin, _ in LINES), "the piped transaction line is run too"


class Reader:
    """What a reader of the page has at hand while following it: a working directory with the
    payload file and the examples, the tokens, and the leaseId the last pop printed."""

    def __init__(self, cluster, workdir: Path):
        self.cluster = cluster
        self.workdir = workdir
        (workdir / "body.bin").write_bytes(b"\x00raw hold body\xff")
        shutil.copytree(REPO / "examples", workdir / "examples")
        self.env = {**os.environ,
                    "QUEEN_URL": ",".join(cluster.url(n) for n in cluster.node_ids),
                    "QUEEN_TOKEN": token("acme", "read-write"),
                    "ADMIN_TOKEN": token("acme", "admin"),
                    "PYTHONPATH": str(REPO)}
        self.lease_id: str | None = None

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line, comments=True)[1:]
        substitutions = {"$ADMIN_TOKEN": self.env["ADMIN_TOKEN"], "<leaseId>": self.lease_id}
        return [substitutions.get(word) or word for word in words]

    def push(self, queue: str, transaction_id: str) -> None:
        status, _, body = self.cluster.call("n1", "POST", "/api/v1/push", token("acme", "read-write"), {
            "items": [{"queue": queue, "payload": {"remind": transaction_id}, "transactionId": transaction_id}]})
        assert status in (200, 201), body

    def pop_lease(self, queue: str, group: str) -> str:
        status, _, body = self.cluster.call(
            "n1", "GET", f"/api/v1/pop/queue/{queue}?consumerGroup={group}&batch=1&wait=true&timeout=5000",
            token("acme", "read-write"))
        assert status == 200 and body["messages"], body
        return body["leaseId"]

    def before(self, argv: list[str]) -> None:
        """What the page's story holds before a line: a message to pop, a lease still held."""
        if argv[:4] == ["pop", "reminders", "--group", "mailer"] and "--batch" in argv:
            self.push("reminders", "remind-9137")
        if argv[:2] == ["lease", "extend"]:
            self.push("reminders", "remind-9138")
            self.lease_id = self.pop_lease("reminders", "mailer")
            argv[2] = self.lease_id

    def stdin_for(self, argv: list[str]) -> str | None:
        """A line that reads a file from stdin (`--file -`) without a pipe on the page gets one."""
        if argv[:2] == ["timer", "schedule"] and argv[-2:] == ["--file", "-"]:
            return '{"timerKey": "from-stdin", "delay": "1h", "payload": {"n": 1}}\n'
        return None

    def after(self, argv: list[str], stdout: str) -> None:
        if argv[0] == "pop" and "--ack" not in argv and "--auto-ack" not in argv:
            answer = json.loads(stdout)
            assert answer["leaseId"] and answer["messages"], answer
            self.lease_id = answer["leaseId"]


def test_every_cli_line_of_the_page_runs_in_order(node_cluster, tmp_path):  # noqa: F811
    reader = Reader(node_cluster, tmp_path)
    failures = []
    for line, stdin, expected in LINES:
        argv = reader.argv(line)
        reader.before(argv)
        run = subprocess.run([sys.executable, "-m", "queen_raft", *argv], cwd=tmp_path, env=reader.env,
                             input=stdin if stdin is not None else reader.stdin_for(argv), capture_output=True,
                             text=True, timeout=60)
        if run.returncode != expected:
            failures.append(f"{line}\n  exit {run.returncode}, the page says {expected}\n  "
                            f"{run.stdout.strip()[:400]}\n  {run.stderr.strip()[:400]}")
            continue
        if expected == 0:
            assert run.stdout.strip(), line
            reader.after(argv, run.stdout)
        else:
            assert json.loads(run.stderr)["error"], line
    assert not failures, "\n".join(failures)
