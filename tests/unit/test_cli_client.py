"""The client commands' command line: parsing, the URL/token sources, and the exit codes that need no cluster."""

from __future__ import annotations

import json
import socket

import pytest

from queen_raft.cli import build_parser, main
from queen_raft.cli.output import EXIT_UNREACHABLE, EXIT_USAGE


def refused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_schedule_arguments_parse_with_repeated_urls():
    args = build_parser().parse_args(["timer", "schedule", "reminders", "order-9137", "--delay", "24h",
                                      "--payload", '{"orderId": 9137}', "--url", "http://a:1", "--url", "http://b:2",
                                      "--token", "t", "--zstd"])
    assert (args.queue, args.key, args.delay, args.payload, args.zstd) == ("reminders", "order-9137", "24h",
                                                                           {"orderId": 9137}, True)
    assert args.url == ["http://a:1", "http://b:2"]


def test_bare_digits_are_refused_with_the_units_to_write(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["pop", "q", "--wait", "1500"])
    assert "'1500ms', '1500s'" in capsys.readouterr().err
    assert build_parser().parse_args(["pop", "q", "--wait", "0"]).wait == 0


@pytest.mark.parametrize("argv", [
    ["timer", "schedule", "q", "k", "--delay", "soon", "--payload", "1"],
    ["timer", "schedule", "q", "k", "--delay", "1s", "--payload", "{not json"],
    ["timer", "schedule", "q", "k", "--delay", "1s"],  # a payload is required
    ["timer", "schedule", "q", "k", "--delay", "1s", "--payload", "1", "--payload-b64", "AA=="],
    ["pop", "q", "--ack", "--auto-ack"],
])
def test_bad_command_lines_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == EXIT_USAGE


def test_no_url_anywhere_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv("QUEEN_URL", raising=False)
    assert main(["timer", "peek", "q", "k"]) == EXIT_USAGE
    assert "QUEEN_URL" in capsys.readouterr().err


def test_unreachable_nodes_exit_3_with_the_error_body_on_stderr(monkeypatch, capsys):
    monkeypatch.setenv("QUEEN_URL", f"{refused_url()},{refused_url()}")
    assert main(["kv", "get", "ns", "k", "--retry-budget", "0.3"]) == EXIT_UNREACHABLE
    out = capsys.readouterr()
    assert out.out == ""
    assert json.loads(out.err.strip().splitlines()[-1])["error"] == "connection_failed"


def test_the_node_and_cluster_commands_are_still_there():
    parser = build_parser()
    assert parser.parse_args(["node", "--id", "n1"]).id == "n1"
    assert parser.parse_args(["cluster", "status", "--config", "x.toml"]).cluster_command == "status"
