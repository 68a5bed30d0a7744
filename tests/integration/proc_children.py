"""A process's live children and whether a process still runs, read from /proc (Linux): the
snapshot tests watch a node's forked snapshot writer with these."""

from __future__ import annotations

import os


def children_of(pid: int) -> list[int]:
    """Live (not zombie) child processes of pid."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat_file:
                fields = stat_file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            children.append(int(entry))
    return children


def process_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
