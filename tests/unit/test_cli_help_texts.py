"""Every command's --help prints and exits 0, and no help text teaches what the CLI refuses."""

from __future__ import annotations

import argparse

import pytest

from queen_raft.cli.main import build_parser


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, prefix + (name,))
    return paths


PATHS = command_paths(build_parser())


def test_the_walk_finds_the_commands():
    assert {("timer", "schedule"), ("admin", "pause"), ("cluster", "up"), ("transaction",), ("usage",)} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "queen-raft" for p in PATHS])
def test_help_prints_and_exits_zero(path, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*path, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: queen-raft")
    assert "bare digits are milliseconds" not in text and "integer of milliseconds" not in text
