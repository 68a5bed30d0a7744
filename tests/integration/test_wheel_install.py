"""A non-editable install runs: the wheel built from this tree, installed into a fresh venv, gives a
`queen-raft` that finds its embedded default config, runs a node, talks to it, and whose SDK
type-checks in a user's project (py.typed). It builds a wheel and a venv and installs the
dependencies (from pip's cache when warm); `make test-wheel` runs it alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cluster_fixture import REPO, NodeCluster, token

pytestmark = pytest.mark.integration

SAMPLE = REPO / "tests" / "unit" / "typing_samples" / "user_script.py"


def run(*argv: str | Path, cwd: Path, timeout: float = 600, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The fresh venv's bin directory, the wheel installed into it (not editable)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # a copy without .venv, data/ or build leftovers
    shutil.copytree(REPO, source, symlinks=True,
                    ignore=shutil.ignore_patterns(".venv", "data", "build", "*.egg-info", "__pycache__", ".git",
                                                  "store"))
    built = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", work / "dist", source, cwd=work)
    assert built.returncode == 0, built.stderr
    [wheel] = (work / "dist").glob("queen_raft-*.whl")
    venv = work / "venv"
    made = run(sys.executable, "-m", "venv", venv, cwd=work)
    assert made.returncode == 0, made.stderr
    pip = run(venv / "bin" / "pip", "install", "--quiet", wheel, cwd=work)
    assert pip.returncode == 0, pip.stderr
    return venv / "bin"


def test_version_is_the_distribution_version(installed, tmp_path):
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = run(installed / "queen-raft", "--version", cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.strip() == f"queen-raft {expected}"


def test_the_embedded_default_config_ships_in_the_package(installed, tmp_path):
    probe = run(installed / "python", "-c",
                "from queen_raft.config import load_config; c = load_config(None); "
                "print(c.source); print(c.nodes[0].http_port)", cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    source, port = probe.stdout.split()
    assert "site-packages" in source and source.endswith("queen_raft/default_config/single.toml")
    assert port == "6632"


class InstalledNode(NodeCluster):
    """One node started by the installed `queen-raft`, from a directory outside the repo."""

    def __init__(self, workdir: Path, bin_dir: Path):
        super().__init__(workdir, node_count=1)
        self.bin_dir = bin_dir

    def start_node(self, node_id: str, without_env: tuple[str, ...] = ()) -> None:
        with open(self.log_path(node_id), "ab") as log:
            self.processes[node_id] = subprocess.Popen(
                [str(self.bin_dir / "queen-raft"), "node", "--config", str(self.config_path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)


def test_the_installed_node_and_cli_schedule_and_peek_a_timer(installed, tmp_path):
    node = InstalledNode(tmp_path, installed).start()
    try:
        env = {"QUEEN_URL": node.url("n1"), "QUEEN_TOKEN": token("acme", "read-write")}
        scheduled = run(installed / "queen-raft", "timer", "schedule", "reminders", "order-1", "--output", "json",
                        "--delay", "24h", "--payload", '{"orderId": 1}', cwd=tmp_path, env=env, timeout=60)
        assert scheduled.returncode == 0, scheduled.stderr
        assert json.loads(scheduled.stdout)["status"] == "scheduled"
        peeked = run(installed / "queen-raft", "timer", "peek", "reminders", "order-1", "--output", "json",
                     cwd=tmp_path, env=env, timeout=60)
        assert peeked.returncode == 0 and json.loads(peeked.stdout)["found"] is True
    finally:
        assert node.stop() == {"n1": 0}


def test_the_installed_sdk_type_checks_in_a_user_project(installed, tmp_path):
    """mypy run from outside the repo against the fresh venv: it can only see the installed SDK,
    whose types reach it through py.typed."""
    script = tmp_path / "app.py"
    script.write_text(SAMPLE.read_text())
    checked = run(sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
                  "--python-executable", installed / "python", script, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
