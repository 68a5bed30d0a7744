"""`queen-raft node` parses with the node's parser alone (cli/node_command.py): a node's start does
not import the other commands, the SDK or their progress bars, and still refuses a CA file it
cannot read (QUEEN_CACERT) with exit 2, as every other command does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from queen_raft.cli.main import build_parser
from queen_raft.cli.node_command import node_parser

REPO = Path(__file__).resolve().parents[2]
NOT_FOR_A_NODE = ("queen_raft.client", "queen_raft.cli.cluster", "queen_raft.cli.timers", "tqdm")


def test_a_node_start_imports_neither_the_sdk_nor_the_other_commands():
    probe = ("import sys\n"
             "from queen_raft.cli.main import _run\n"
             "import queen_raft.node\n"
             "try:\n    _run(['node', '--config', '/nonexistent/cluster.toml'])\n"
             "except SystemExit:\n    pass\n"
             f"print(sorted(m for m in sys.modules if m.startswith({NOT_FOR_A_NODE!r})))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout + result.stderr


def test_the_node_parser_parses_as_the_full_one():
    words = ["node", "--config", "c.toml", "--id", "n2"]
    alone, full = node_parser("queen-raft").parse_args(words), build_parser().parse_args(words)
    assert (alone.command, alone.config, alone.id, alone.handler) == (full.command, full.config, full.id, full.handler)


def test_a_node_refuses_a_ca_file_it_cannot_read_with_exit_2(tmp_path):
    missing = str(tmp_path / "missing.pem")
    env = {**os.environ, "QUEEN_CACERT": missing}
    args = [sys.executable, "-m", "queen_raft", "node", "--config", str(REPO / "cluster_configs" / "local-3.toml"), "--id", "n1"]
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"cannot use the CA file {missing}" in result.stderr and "Traceback" not in result.stderr
