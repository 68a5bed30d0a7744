"""`timer schedule --file`: what a line may say, the line named in each refusal, and the progress
helper's choice of drawing (a terminal) or not (anything else)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest

from queen_raft.cli import build_parser
from queen_raft.cli.output import UsageError
from queen_raft.cli.progress import QuietBar, open_bar, shows_progress
from queen_raft.cli.timer_file import read_schedule_ops, row_spec
from queen_raft.client import Queen


def test_a_full_line_becomes_the_timer_it_says():
    spec = row_spec({"queue": "q", "timerKey": "k", "delay": "15m", "payloadB64": "AAE=", "partition": "p",
                     "txn": "t", "zstd": True}, None)
    assert (spec.queue, spec.timer_key, spec.delay, spec.payload, spec.partition, spec.txn, spec.zstd) == (
        "q", "k", "15m", b"\x00\x01", "p", "t", True)
    spec = row_spec({"timerKey": "k", "at": "2030-01-01T09:00:00+01:00", "payload": None}, "default-q")
    assert spec.queue == "default-q" and spec.payload is None
    assert spec.at == datetime(2030, 1, 1, 8, tzinfo=timezone.utc)


@pytest.mark.parametrize("row,why", [
    ([1, 2], "a line must be a JSON object"),
    ({"queue": "q", "timerKey": "k", "delay": "1s", "payload": 1, "delayMs": 5}, r"unknown field\(s\) delayMs \(known: at, delay,"),
    ({"timerKey": "k", "delay": "1s", "payload": 1}, "queue is missing"),
    ({"queue": "q", "delay": "1s", "payload": 1}, "timerKey must be a non-empty string"),
    ({"queue": "q", "timerKey": "k", "payload": 1}, "give exactly one of delay and at"),
    ({"queue": "q", "timerKey": "k", "delay": "1s", "at": "2030-01-01T00:00:00Z", "payload": 1}, "exactly one of delay"),
    ({"queue": "q", "timerKey": "k", "delay": 3600, "payload": 1}, "a bare integer is no duration"),
    ({"queue": "q", "timerKey": "k", "delay": "soon", "payload": 1}, "duration 'soon' is not like"),
    ({"queue": "q", "timerKey": "k", "at": "2030-01-01T00:00:00", "payload": 1}, "with its offset"),
    ({"queue": "q", "timerKey": "k", "delay": "1s"}, "give exactly one of payload and payloadB64"),
    ({"queue": "q", "timerKey": "k", "delay": "1s", "payloadB64": "not base64!"}, "payloadB64 is not base64"),
    ({"queue": "q", "timerKey": "k", "delay": "1s", "payload": 1, "zstd": "yes"}, "zstd must be true or false"),
])
def test_a_bad_line_says_what_is_wrong(row, why):
    with pytest.raises((ValueError, TypeError), match=why):
        row_spec(row, None)


async def test_the_first_bad_line_is_named_with_its_number(tmp_path):
    path = tmp_path / "rows.jsonl"
    good = json.dumps({"queue": "q", "timerKey": "a", "delay": "1s", "payload": 1})
    path.write_text(f"{good}\n\n{good}\n{{not json\n{good}\n")
    async with Queen(urls=["http://127.0.0.1:9"]) as q:
        with pytest.raises(UsageError, match=rf"^{path} line 4: "):
            read_schedule_ops(str(path), None, q)
        path.write_text("\n\n")
        with pytest.raises(UsageError, match="no timer in it"):
            read_schedule_ops(str(path), None, q)
        path.write_text(f"{good}\n{good}\n")
        ops = read_schedule_ops(str(path), None, q)
    assert [number for number, _ in ops] == [1, 2]
    assert ops[0][1]["txn"] != ops[1][1]["txn"]  # each line's txn minted before any call


@pytest.mark.parametrize("argv,error", [
    (["timer", "schedule", "--file", "rows.jsonl", "--delay", "1s"], "not with --delay"),
    (["timer", "schedule", "q", "k", "--file", "rows.jsonl"], "not with KEY"),
    (["timer", "schedule", "q", "k", "--payload", "1"], "needs --delay"),
    (["timer", "schedule"], "needs QUEUE, KEY, --delay, one of --payload"),
])
def test_the_single_and_the_file_forms_do_not_mix(argv, error, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2 and error in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only():
    assert not shows_progress(io.StringIO()) and shows_progress(Terminal())
    assert isinstance(open_bar("work", 3, stream=io.StringIO()), QuietBar)
    terminal = Terminal()
    bar = open_bar("work", 3, " rows", stream=terminal)
    bar.update(3)
    bar.close()
    assert "work" in terminal.getvalue() and "\r" in terminal.getvalue()
