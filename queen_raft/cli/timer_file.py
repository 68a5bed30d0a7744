"""`queen-raft timer schedule --file rows.jsonl`: many timers from a file, one JSON object a line.

A line: `{"queue", "timerKey", "delay" | "at", "payload" | "payloadB64", "partition"?, "txn"?,
"zstd"?}`. `queue` may be left out when the command line names a QUEUE (the default for every
line); `delay` is a duration as `--delay` takes it ("15m"; 0), `at` an ISO 8601 instant with its
offset ("2030-01-01T09:00:00+01:00"); `payload` any JSON value, `payloadB64` raw bytes. Blank
lines are skipped. `-` reads stdin.

Every line is read and checked before the first call, so a bad line (not JSON, a field missing,
unknown or of the wrong type) is refused with its line number and nothing is sent. The timers then
go in calls of 256 (the server's default cap of ops per POST /api/v1/timers), in file order; each
txn is minted before the first call, so a retried call carries the same ones. The answer is a
summary (`rows`, `calls`, `scheduled`, `rescheduled`); when a call is refused the summary of the
calls before it is printed (with `notSentFromLine`) and the refusal exits 1 as usual.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from queen_raft.cli.output import UsageError, print_json
from queen_raft.cli.progress import open_bar
from queen_raft.client import Queen
from queen_raft.client.batch import MAX_TIMER_OPS_PER_CALL, BatchInterrupted, send_schedules
from queen_raft.client.durations import duration_ms
from queen_raft.client.timers import TimerSpec

FIELDS = {"queue", "timerKey", "delay", "at", "payload", "payloadB64", "partition", "txn", "zstd"}


def file_lines(path: str) -> Iterator[tuple[int, str]]:
    try:
        stream = sys.stdin if path == "-" else open(Path(path), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--file {path}: {exc.strerror or exc}") from None
    try:
        for number, line in enumerate(stream, 1):
            if line.strip():
                yield number, line
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text ({exc.reason})") from None
    finally:
        if stream is not sys.stdin:
            stream.close()


def _string(row: dict, name: str, required: bool = False) -> str | None:
    value = row.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _when(row: dict) -> tuple[Any, datetime | None]:
    if ("delay" in row) == ("at" in row):
        raise ValueError("give exactly one of delay and at")
    if "delay" in row:
        delay = row["delay"]
        if isinstance(delay, bool) or not isinstance(delay, (str, int)):
            raise ValueError("delay must be a duration such as \"15m\" (or 0)")
        duration_ms(delay)  # ValueError/TypeError with the SDK's own words
        return delay, None
    try:
        instant = datetime.fromisoformat(row["at"]) if isinstance(row["at"], str) else None
    except ValueError:
        instant = None
    if instant is None or instant.tzinfo is None:
        raise ValueError("at must be an ISO 8601 instant with its offset, e.g. \"2030-01-01T09:00:00Z\"")
    return None, instant


def _payload(row: dict) -> Any:
    if ("payload" in row) == ("payloadB64" in row):
        raise ValueError("give exactly one of payload and payloadB64")
    if "payload" in row:
        return row["payload"]
    try:
        return base64.b64decode(_string(row, "payloadB64", required=True) or "", validate=True)
    except binascii.Error:
        raise ValueError("payloadB64 is not base64") from None


def row_spec(row: Any, default_queue: str | None) -> TimerSpec:
    """One line's TimerSpec, or ValueError/TypeError saying what is wrong with it."""
    if not isinstance(row, dict):
        raise ValueError("a line must be a JSON object")
    unknown = sorted(set(row) - FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})")
    queue = _string(row, "queue") or default_queue
    if queue is None:
        raise ValueError("queue is missing (give it on the line, or QUEUE on the command line)")
    if not isinstance(row.get("zstd", False), bool):
        raise ValueError("zstd must be true or false")
    delay, at = _when(row)
    return TimerSpec(queue=queue, timer_key=_string(row, "timerKey", required=True), delay=delay, at=at,
                     partition=_string(row, "partition"), txn=_string(row, "txn"), payload=_payload(row),
                     zstd=row.get("zstd", False))


def read_schedule_ops(path: str, default_queue: str | None, q: Queen) -> list[tuple[int, dict]]:
    """(line number, schedule op) for every line, or UsageError naming the first bad line."""
    ops = []
    for number, line in file_lines(path):
        try:
            spec = row_spec(json.loads(line), default_queue)
            ops.append((number, spec.schedule_op(clock=q.transport.group_clock)))
        except (ValueError, TypeError) as exc:  # json's JSONDecodeError is a ValueError
            raise UsageError(f"{path} line {number}: {exc}") from None
    if not ops:
        raise UsageError(f"{path}: no timer in it (one JSON object a line)")
    return ops


async def schedule_file(q: Queen, args: argparse.Namespace) -> dict:
    numbered = read_schedule_ops(args.file, args.queue, q)
    summary = {"rows": len(numbered), "calls": 0, "scheduled": 0, "rescheduled": 0}
    bar = open_bar("scheduling", total=len(numbered), unit=" timers")
    try:
        for start in range(0, len(numbered), MAX_TIMER_OPS_PER_CALL):
            chunk = numbered[start:start + MAX_TIMER_OPS_PER_CALL]
            try:
                results = await send_schedules(q.transport, [op for _, op in chunk])
            except BatchInterrupted as exc:
                print_json({**summary, "notSentFromLine": chunk[0][0]})
                raise exc.error from None
            summary["calls"] += 1
            for result in results:
                summary[result.status] = summary.get(result.status, 0) + 1
            bar.update(len(chunk))
    finally:
        bar.close()
    return summary
