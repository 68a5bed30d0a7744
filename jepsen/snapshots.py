"""Seeing a node's snapshot writers from outside: the live children of its process.

A node writes its snapshot in a child it forks (pysyncobj's `useFork`): the child pickles the state,
writes `raft.snapshot.tmp` and renames it into place, while the node goes on serving. The node runs
no other child process, so "a live child of the node's PID" is "a snapshot being written". The
snapshot nemeses wait for such a moment and act inside it, because a stop or a kill then races the
writer's rename against the next start's reading of the journal and the snapshot.

The fork is made on the node's tick thread, not its main thread, and Linux lists a child under the
thread that forked it (`/proc/<pid>/task/<tid>/children`), so every thread's list is read. Where
those files do not exist (a kernel without CONFIG_PROC_CHILDREN), every `/proc/<pid>/stat` is
scanned for the parent PID instead. A zombie (exited, not reaped yet) has finished writing: it does
not count.

A node runs one group per tenant, and each group forks its own writer. The runs hold a large
timer tenant beside a small one whose state is written in milliseconds, so a fault meant for the
large snapshot must not act on the small one's writer: `writes_snapshot_of` tells a writer's
tenant by the snapshot file it has open (`<data_dir>/<node>/<tenant>/raft.snapshot.writing.*`,
named in /proc/<child>/fd). The child inherits its parent's descriptors (the journals of every
tenant), so only the snapshot file it opened itself names the tenant.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
# The name the node's snapshot writer gives the file it writes (queen_raft/raft/snapshot_writer.py).
WRITING_PREFIX = "raft.snapshot.writing."
# How often the writers are looked for while waiting. One look reads every thread's list of every
# node (about a millisecond in all), so a tighter poll would take a good part of a core from the
# nodes; a state large enough for the race is written for seconds, not milliseconds.
POLL_S = 0.02


def _stat_fields(proc: Path, pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process from its /proc/<pid>/stat, or None when it is gone.

    The command name sits in parentheses and may itself hold spaces and parentheses, so the fields
    are counted from the last ')'."""
    try:
        text = (proc / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rfind(")") + 2:].split()
    if len(rest) < 2:
        return None
    return rest[0], int(rest[1])


def is_live(pid: int, proc: Path = PROC) -> bool:
    """True while the process exists and has not exited (a zombie has)."""
    fields = _stat_fields(proc, pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _children_from_tasks(proc: Path, pid: int) -> set[int] | None:
    """Children named by the task lists, or None when this kernel has no such lists."""
    tasks = proc / str(pid) / "task"
    try:
        task_dirs = list(tasks.iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return set()  # the process is gone: no children
    found: set[int] = set()
    any_list = False
    for task in task_dirs:
        try:
            text = (task / "children").read_text(encoding="utf-8")
        except FileNotFoundError:
            continue  # this task has just exited, or the kernel has no children lists
        except (ProcessLookupError, PermissionError):
            continue
        any_list = True
        found.update(int(word) for word in text.split())
    return found if any_list else None


def _children_from_stat_scan(proc: Path, pid: int) -> set[int]:
    found = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(proc, int(entry.name))
        if fields is not None and fields[1] == pid:
            found.add(int(entry.name))
    return found


def live_children(pid: int, proc: Path = PROC) -> list[int]:
    """The PIDs of pid's children that are still running (zombies left out), sorted."""
    children = _children_from_tasks(proc, pid)
    if children is None:
        children = _children_from_stat_scan(proc, pid)
    return sorted(child for child in children if is_live(child, proc))


def writes_snapshot_of(pid: int, tenant: str, proc: Path = PROC) -> bool:
    """True while the process has a snapshot of `tenant` open for writing."""
    try:
        descriptors = list((proc / str(pid) / "fd").iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return False
    for descriptor in descriptors:
        try:
            target = Path(os.readlink(descriptor))
        except OSError:
            continue  # closed meanwhile
        if target.name.startswith(WRITING_PREFIX) and target.parent.name == tenant:
            return True
    return False


def live_writers_of(tenant: str, proc: Path = PROC) -> Callable[[int], list[int]]:
    """`children` for wait_for_writers: a node's live children that write the tenant's snapshot."""
    return lambda pid: [child for child in live_children(pid, proc) if writes_snapshot_of(child, tenant, proc)]


@dataclass
class WriterWait:
    """What a wait for snapshot writers saw: each node's live children at the last look."""

    found: bool
    waited_s: float
    looks: int
    writers: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"during_snapshot": self.found, "waited_s": round(self.waited_s, 3), "looks": self.looks,
                "writers": {node: pids for node, pids in self.writers.items() if pids}}


def wait_for_writers(pids: dict[str, int], min_nodes: int, timeout_s: float, poll_s: float = POLL_S,
                     children: Callable[[int], list[int]] = live_children,
                     stop: Callable[[], bool] = lambda: False) -> WriterWait:
    """Polls until at least `min_nodes` of the nodes (node id -> PID) have a live child, or until
    timeout_s has passed, or stop() says so. Never raises for a node that exits meanwhile."""
    started = time.monotonic()
    deadline = started + timeout_s
    looks = 0
    while True:
        looks += 1
        writers = {node: children(pid) for node, pid in pids.items()}
        if sum(1 for found in writers.values() if found) >= min_nodes:
            return WriterWait(True, time.monotonic() - started, looks, writers)
        if time.monotonic() >= deadline or stop():
            return WriterWait(False, time.monotonic() - started, looks, writers)
        time.sleep(poll_s)


def outliving(writers: dict[str, list[int]], is_alive: Callable[[int], bool] = is_live) -> dict[str, list[int]]:
    """Of the writers seen before the nodes went down, those still running now: each one may still
    rename its snapshot into place after its node is gone."""
    return {node: alive for node, pids in writers.items() if (alive := [pid for pid in pids if is_alive(pid)])}


def snapshot_fault_notes(events: Iterable, faults: tuple[str, ...]) -> list[str]:
    """One line per snapshot fault of a history: whether writers were running when it acted, and
    which writers outlived their nodes (each one could rename a snapshot after its node was gone)."""
    notes = []
    for event in events:
        value = event.value if isinstance(event.value, dict) else {}
        if event.type == "invoke" or value.get("fault") not in faults or value.get("phase") != "start":
            continue
        writers = value.get("writers") or {}
        seen = ", ".join(f"{node} {pids}" for node, pids in sorted(writers.items())) or "none"
        left = value.get("writers_outliving_nodes") or {}
        notes.append(f"{value['fault']}: during_snapshot={value.get('during_snapshot')} after waiting "
                     f"{value.get('waited_s')} s; writers seen: {seen}; writers outliving their nodes: "
                     + (", ".join(f"{node} {pids}" for node, pids in sorted(left.items())) or "none"))
    return notes
