"""The SDK is typed for its users: mypy --strict (the repo's [tool.mypy]) passes on queen_raft/client
and on a user's script, and flags the bare-integer delay. The installed wheel's py.typed is checked
by tests/integration/test_wheel_install.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).resolve().parent / "typing_samples"


def mypy(*targets: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null",
                           "--config-file", str(ROOT / "pyproject.toml"), *map(str, targets)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_sdk_package_is_clean_under_strict_mypy():
    run = mypy("queen_raft/client")
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_user_script_type_checks_against_the_sdk():
    run = mypy(SAMPLES / "user_script.py")
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_flags_a_bare_integer_delay():
    run = mypy(SAMPLES / "int_delay.py")
    assert run.returncode == 1
    assert 'Argument 1 to "delay"' in run.stdout


@pytest.mark.parametrize("name", ["py.typed"])
def test_the_marker_ships_in_the_package(name):
    assert (ROOT / "queen_raft" / name).is_file()
