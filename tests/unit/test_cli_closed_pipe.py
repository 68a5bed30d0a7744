"""A reader that stops reading (`queen-raft cluster status | head`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from queen_raft.cli.main import EXIT_READER_GONE

REPO = Path(__file__).resolve().parents[2]


# `cluster status` prints its table whether or not the nodes run. (argparse's own --help and
# --version swallow a closed pipe themselves.)
@pytest.mark.parametrize("argv", [["cluster", "status", "--config", "cluster_configs/local-3.toml"]])
def test_a_closed_pipe_ends_the_command_without_a_traceback(argv):
    child = subprocess.Popen([sys.executable, "-m", "queen_raft", *argv], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()  # the reader is gone before the command writes its first byte
    _, stderr = child.communicate(timeout=60)
    assert b"Traceback" not in stderr and b"Exception ignored" not in stderr, stderr.decode()
    assert child.returncode == EXIT_READER_GONE
