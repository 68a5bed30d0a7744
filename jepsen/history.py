"""The history of a run: one JSON line per invocation and per completion, as Jepsen keeps it.

An operation is invoked (`invoke`) and then completes exactly once as `ok` (it happened, with this
answer), `fail` (it certainly did not happen) or `info` (unknown: a timeout, a dropped connection, a
5xx that may have been committed later). Checkers read `info` as "possibly applied, at any time after
the invocation". The nemesis writes its fault starts and stops here too, so one file tells the whole
story of a run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
INFO = "info"
COMPLETIONS = (OK, FAIL, INFO)

NEMESIS_PROCESS = "nemesis"


def monotonic_ns() -> int:
    return time.monotonic_ns()


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Event:
    """One line of the history."""

    process: int | str
    type: str
    f: str
    value: Any = None
    time: int = 0  # monotonic ns: the only clock real-time order is judged on
    wall_ms: int = 0  # the harness's wall clock: compared with deliverAt (shared host clock)
    node: str | None = None
    answer: Any = None
    # The workload (and so the tenant) a client operation belongs to; None for the nemesis.
    workload: str | None = None

    def to_json(self) -> dict:
        row = {
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
            "time": self.time,
            "wall_ms": self.wall_ms,
            "node": self.node,
            "answer": self.answer,
        }
        if self.workload is not None:
            row["workload"] = self.workload
        return row

    @classmethod
    def from_json(cls, row: dict) -> "Event":
        return cls(
            process=row["process"],
            type=row["type"],
            f=row["f"],
            value=row.get("value"),
            time=int(row.get("time", 0)),
            wall_ms=int(row.get("wall_ms", 0)),
            node=row.get("node"),
            answer=row.get("answer"),
            workload=row.get("workload"),
        )


@dataclass
class Operation:
    """An invocation paired with its completion; `type` is the completion's, or info if none came."""

    process: int | str
    f: str
    value: Any
    type: str
    invoke_time: int
    complete_time: int | None  # None: never completed (treated as info, open to the end)
    invoke_wall_ms: int
    complete_wall_ms: int | None
    node: str | None
    answer: Any
    index: int = 0  # position of the invocation in the history: a stable id for counterexamples
    workload: str | None = None  # the workload whose client made it (None: the nemesis, or an untagged history)

    @property
    def possibly_applied(self) -> bool:
        return self.type in (OK, INFO)

    def summary(self) -> dict:
        return {
            "index": self.index,
            "process": self.process,
            "f": self.f,
            "type": self.type,
            "value": self.value,
            "answer": self.answer,
            "node": self.node,
            "invoke_wall_ms": self.invoke_wall_ms,
            "complete_wall_ms": self.complete_wall_ms,
        }


class HistoryWriter:
    """Appends events to a JSONL file and keeps them in memory for the checkers.

    Lines are flushed as they are written, so a run that crashes still leaves its history behind.
    """

    def __init__(self, path: Path | None) -> None:
        self.events: list[Event] = []
        self._file: IO[str] | None = path.open("w", encoding="utf-8") if path is not None else None

    def append(self, event: Event) -> Event:
        self.events.append(event)
        if self._file is not None:
            self._file.write(json.dumps(event.to_json(), separators=(",", ":"), default=str) + "\n")
            self._file.flush()
        return event

    def invoke(self, process: int | str, f: str, value: Any, node: str | None = None,
               workload: str | None = None) -> Event:
        return self.append(
            Event(process, INVOKE, f, value, monotonic_ns(), wall_ms(), node, workload=workload)
        )

    def complete(
        self, invocation: Event, type_: str, answer: Any = None, value: Any = None, node: str | None = None
    ) -> Event:
        if type_ not in COMPLETIONS:
            raise ValueError(f"a completion is one of {COMPLETIONS}, got {type_!r}")
        return self.append(
            Event(
                invocation.process,
                type_,
                invocation.f,
                invocation.value if value is None else value,
                monotonic_ns(),
                wall_ms(),
                node if node is not None else invocation.node,
                answer,
                invocation.workload,
            )
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_events(path: Path) -> list[Event]:
    with path.open(encoding="utf-8") as handle:
        return [Event.from_json(json.loads(line)) for line in handle if line.strip()]


def pair_operations(events: Iterable[Event]) -> list[Operation]:
    """Pairs each invocation with the next completion of the same process (of the same workload:
    each workload's set-up and final reads use the same process names).

    A process runs one operation at a time (Jepsen's rule), so the pairing is unambiguous. An
    invocation left without a completion (the harness stopped) becomes an open-ended info.
    """
    open_by_process: dict[tuple[str | None, Any], tuple[int, Event]] = {}
    operations: list[Operation | None] = []
    for event in events:
        key = (event.workload, event.process)
        if event.type == INVOKE:
            if key in open_by_process:
                raise ValueError(f"process {event.process!r} invoked twice without completing")
            open_by_process[key] = (len(operations), event)
            operations.append(None)
            continue
        slot = open_by_process.pop(key, None)
        if slot is None:
            raise ValueError(f"completion without invocation for process {event.process!r}: {event}")
        position, invocation = slot
        operations[position] = Operation(
            process=invocation.process,
            f=invocation.f,
            value=event.value if event.value is not None else invocation.value,
            type=event.type,
            invoke_time=invocation.time,
            complete_time=event.time,
            invoke_wall_ms=invocation.wall_ms,
            complete_wall_ms=event.wall_ms,
            node=event.node or invocation.node,
            answer=event.answer,
            index=position,
            workload=invocation.workload,
        )
    for position, invocation in open_by_process.values():
        operations[position] = Operation(
            process=invocation.process,
            f=invocation.f,
            value=invocation.value,
            type=INFO,
            invoke_time=invocation.time,
            complete_time=None,
            invoke_wall_ms=invocation.wall_ms,
            complete_wall_ms=None,
            node=invocation.node,
            answer=None,
            index=position,
            workload=invocation.workload,
        )
    return [op for op in operations if op is not None]


def client_operations(operations: Iterable[Operation]) -> Iterator[Operation]:
    return (op for op in operations if op.process != NEMESIS_PROCESS)


def workload_operations(operations: Iterable[Operation], workload: str) -> list[Operation]:
    """The operations one workload's checkers judge: its own clients', and the nemesis's (fault
    records). An untagged client operation (a history written before runs held several workloads)
    belongs to the run's only workload, so it is kept too."""
    return [op for op in operations if op.workload in (None, workload)]


@dataclass
class FaultWindow:
    """A fault from its start (nemesis invoke) to the end of its stop, on both clocks."""

    fault: str
    start_time: int
    end_time: int | None
    start_wall_ms: int
    end_wall_ms: int | None
    detail: dict = field(default_factory=dict)

    def overlaps_wall(self, low_ms: int, high_ms: int, grace_ms: int) -> bool:
        end = self.end_wall_ms if self.end_wall_ms is not None else float("inf")
        return low_ms <= end + grace_ms and high_ms >= self.start_wall_ms


def fault_windows(events: Iterable[Event]) -> list[FaultWindow]:
    """Fault windows from the nemesis' events: value {fault, phase: start|stop, ...}.

    A window opens at the invocation of its start and closes at the completion of its stop, so it
    covers the whole time the fault could have been in force.
    """
    windows: list[FaultWindow] = []
    open_windows: dict[str, FaultWindow] = {}
    for event in events:
        if event.process != NEMESIS_PROCESS or not isinstance(event.value, dict):
            continue
        fault = event.value.get("fault")
        phase = event.value.get("phase")
        if phase == "start" and event.type == INVOKE:
            window = FaultWindow(fault, event.time, None, event.wall_ms, None, dict(event.value))
            open_windows[fault] = window
            windows.append(window)
        elif phase == "start" and event.type != INVOKE and fault in open_windows:
            # The start's completion says what was done (targets, offsets): keep it with the window.
            open_windows[fault].detail.update(event.value)
        elif phase == "stop" and event.type != INVOKE and fault in open_windows:
            window = open_windows.pop(fault)
            window.end_time = event.time
            window.end_wall_ms = event.wall_ms
    return windows
