"""docs/operations.md and deploy/systemd/queen-raft@.service against the code: the unit file's
keys, its ExecStart through the real CLI parser, every `queen-raft` command line of the page
through the same parser, and every QUEEN_* variable and setting the page names exists."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from queen_raft.api.connections import (
    FD_RESERVE_BASE,
    FD_RESERVE_PER_TENANT,
    LISTEN_BACKLOG,
)
from queen_raft.cli import build_parser
from queen_raft.config_settings import SETTING_SPECS, Settings
from queen_raft.node import SHUTDOWN_GRACE_S

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "systemd" / "queen-raft@.service"
OPERATIONS = REPO / "docs" / "operations.md"
EXIT_DAMAGED_DATA = 65
EXIT_BAD_ENVIRONMENT = 78
# The tenants a default node should hold within the unit's LimitNOFILE.
TENANTS_THE_LIMIT_COVERS = 64


def unit_sections() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def parses(argv: list[str]):
    """The namespace the real CLI parser makes of argv (None for `--version`, which argparse answers
    with exit 0); any other exit of argparse is a failure."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code == 0 and argv == ["--version"]:
            return None
        pytest.fail(f"queen-raft {' '.join(argv)}: the CLI parser refuses it (exit {exc.code})")


def test_the_unit_runs_one_node_per_instance_through_the_real_cli():
    service = unit_sections()["Service"]
    argv = shlex.split(service["ExecStart"].replace("%i", "n1"))
    assert Path(argv[0]).name == "queen-raft"
    args = parses(argv[1:])
    assert args.command == "node"
    assert args.id == "n1"
    assert str(args.config) == "/etc/queen-raft/cluster.toml"


def test_the_unit_restarts_on_failure_but_not_on_damaged_data_or_a_bad_environment():
    service = unit_sections()["Service"]
    assert service["Restart"] == "on-failure"
    kept_down = {int(code) for code in service["RestartPreventExitStatus"].split()}
    assert {EXIT_DAMAGED_DATA, EXIT_BAD_ENVIRONMENT} <= kept_down
    assert float(service["TimeoutStopSec"]) > SHUTDOWN_GRACE_S


def test_the_unit_open_file_limit_holds_the_default_connections_and_their_reserve():
    service = unit_sections()["Service"]
    needed = (Settings().http_max_connections + FD_RESERVE_BASE + FD_RESERVE_PER_TENANT * TENANTS_THE_LIMIT_COVERS
              + 2 * LISTEN_BACKLOG)
    assert int(service["LimitNOFILE"]) >= needed


def test_the_unit_is_hardened_and_can_still_write_its_data_dir():
    service = unit_sections()["Service"]
    assert service["User"] and service["User"] != "root"
    assert service["NoNewPrivileges"] == "true"
    assert service["PrivateTmp"] == "true"
    assert service["ProtectSystem"] == "strict"
    writable = service["ReadWritePaths"].split()
    assert service["WorkingDirectory"] in writable
    assert "/var/lib/queen-raft" in writable
    assert "data_dir = \"/var/lib/queen-raft\"" in OPERATIONS.read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path):
    # ExecStart must name an executable file for verify: point it at this checkout's entry point.
    installed = shutil.which("queen-raft") or str(REPO / ".venv" / "bin" / "queen-raft")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/queen-raft/bin/queen-raft", installed))
    run = subprocess.run(["systemd-analyze", "verify", str(unit)], check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "queen-raft@" not in run.stderr, run.stderr


def without_env_assignments(line: str) -> str:
    """`QUEEN_CACERT=ca.pem queen-raft ...` is the command `queen-raft ...`."""
    return re.sub(r"^\s*(?:[A-Z_]+=\S+\s+)*", "", line)


def operations_command_lines() -> list[list[str]]:
    """Every `queen-raft ...` command line of the page: each such line of a code block, and each
    inline code span that gives options (a bare `queen-raft cluster status` in prose names the
    command, it is not a line to run)."""
    text = OPERATIONS.read_text()
    lines: list[str] = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL):
        lines += [without_env_assignments(line) for line in block.splitlines()
                  if without_env_assignments(line).startswith("queen-raft ")]
    prose = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.DOTALL)
    # A span may wrap across a line of the markdown source.
    spans = [span.replace("\n", " ") for span in re.findall(r"`(queen-raft [^`]*)`", prose)]
    lines += [span for span in spans if " --" in span]
    return [shlex.split(line.replace("...", ""), comments=True)[1:] for line in lines]


COMMAND_LINES = operations_command_lines()


def test_the_page_shows_the_operator_commands():
    assert len(COMMAND_LINES) >= 20
    shown = {tuple(argv[:2]) for argv in COMMAND_LINES}
    for sub in ("up", "start", "stop", "kill", "restart", "restart-all", "status", "backup", "restore"):
        assert ("cluster", sub) in shown, sub


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=[" ".join(a[:3]) for a in COMMAND_LINES])
def test_each_command_line_of_the_page_parses(argv):
    parses(argv)


def queen_variables_in_the_code() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "queen_raft").rglob("*.py"):
        names |= set(re.findall(r"\"(QUEEN_[A-Z0-9_]+)\"", path.read_text()))
    return names | {spec.env for spec in SETTING_SPECS} | {spec.old_env for spec in SETTING_SPECS if spec.old_env}


def test_every_queen_variable_the_page_names_is_read_by_the_code():
    named = set(re.findall(r"\bQUEEN_[A-Z0-9_]+\b", OPERATIONS.read_text()))
    assert named, "the page names no variable"
    assert named <= queen_variables_in_the_code(), sorted(named - queen_variables_in_the_code())


def test_every_setting_the_page_sets_exists():
    text = OPERATIONS.read_text()
    keys = {spec.key for spec in SETTING_SPECS} | {spec.old_key for spec in SETTING_SPECS if spec.old_key}
    # `name = value` in prose or a TOML block, and `name` next to its QUEEN_* variable.
    set_in_page = set(re.findall(r"^([a-z][a-z0-9_]*_[a-z0-9_]+) = ", text, re.MULTILINE))
    set_in_page |= set(re.findall(r"`([a-z][a-z0-9_]*_[a-z0-9_]+)(?: = [^`]*)?`\s*\(`QUEEN_", text))
    config_keys = {"data_dir", "http_port", "raft_port", "token_sha256", "timers_max_pending"}
    assert set_in_page, "the page sets nothing"
    assert set_in_page <= keys | config_keys, sorted(set_in_page - keys - config_keys)


def test_every_alert_runbook_is_a_section_of_the_page():
    from test_repo_links import heading_anchors

    rules = (REPO / "deploy" / "prometheus" / "queen-raft.rules.yml").read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", rules, re.MULTILINE)
    runbooks = re.findall(r"runbook: docs/operations\.md#(\S+)", rules)
    assert len(runbooks) == len(alerts) >= 7
    assert set(runbooks) <= heading_anchors(OPERATIONS), sorted(set(runbooks) - heading_anchors(OPERATIONS))
