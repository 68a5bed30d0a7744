"""Every `queen-raft` line of the README's CLI block runs against a real node and exits 0 (the
README's dev tokens swapped for the test cluster's)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from cluster_fixture import REPO, node_cluster, token  # noqa: F401  (node_cluster is a fixture)

pytestmark = pytest.mark.integration

COMMAND = ".venv/bin/queen-raft"
DEV_TOKENS = {"acme-admin-dev": token("acme", "admin"), "acme-rw-dev": token("acme", "read-write")}


def readme_cli_lines() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    block = next(b for b in blocks if f"{COMMAND} " in b)
    lines = []
    for line in block.splitlines():
        if line.startswith(COMMAND):
            argv = shlex.split(line, comments=True)
            lines.append([DEV_TOKENS.get(word, word) for word in argv[1:]])
    return lines


LINES = readme_cli_lines()


def test_the_readme_shows_the_commands_this_test_runs():
    assert len(LINES) >= 9
    assert {argv[0] for argv in LINES} >= {"--version", "timer", "pop", "transaction", "dlq", "admin", "usage", "queue"}


@pytest.mark.parametrize("argv", LINES, ids=[" ".join(a[:3]) for a in LINES])
def test_each_readme_cli_line_runs(node_cluster, argv):  # noqa: F811
    env = {**os.environ, "QUEEN_URL": ",".join(node_cluster.url(n) for n in node_cluster.node_ids),
           "QUEEN_TOKEN": token("acme", "read-write")}
    run = subprocess.run([sys.executable, "-m", "queen_raft", *argv], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, f"{argv}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert run.stdout.strip()
