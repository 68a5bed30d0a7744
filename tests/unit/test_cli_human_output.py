"""`--output table` for people (ISO 8601 instants with the delay from now), JSON for scripts, and
`--version`."""

from __future__ import annotations

import pytest

from queen_raft.cli.main import build_parser
from queen_raft.cli.output import installed_version, print_answer
from queen_raft.cli.table import relative, render

NOW = 1_796_000_000_000


def test_instants_are_iso_8601_in_utc_with_the_delay_from_now():
    text = render({"results": [{"ok": True, "status": "scheduled", "timerKey": "k",
                                "deliverAt": NOW + 86_340_000}]}, now_ms=NOW)
    header, row = text.splitlines()
    assert header.split() == ["ok", "status", "timerKey", "deliverAt"]
    assert "2026-12-01T00:52:20.000Z (in 23h59m)" in row


@pytest.mark.parametrize("delta, shown", [(0, "now"), (90_000, "in 1m30s"), (-5_000, "5s ago"),
                                          (3 * 86_400_000 + 7_200_000, "in 3d2h"), (3_600_000, "in 1h0m")])
def test_relative_delays_show_the_two_largest_units(delta, shown):
    assert relative(delta) == shown


def test_a_single_answer_is_one_line_a_field():
    assert render({"found": False, "queue": "r", "timerKey": "k"}, now_ms=NOW) == "found: false\nqueue: r\ntimerKey: k"


def test_json_is_the_default_when_piped_and_table_is_asked_for_by_name(capsys):
    print_answer({"found": True, "createdAt": NOW}, None)  # capsys's stdout is no terminal
    assert capsys.readouterr().out == '{"found": true, "createdAt": 1796000000000}\n'
    print_answer({"found": True, "createdAt": NOW}, "table")
    assert capsys.readouterr().out.startswith("found: true\ncreatedAt: 2026-11-30T00:53:20.000Z (")


def test_every_client_command_takes_output():
    args = build_parser().parse_args(["timer", "peek", "r", "k", "--output", "table"])
    assert args.output == "table"


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"queen-raft {installed_version()}" != "queen-raft unknown"
