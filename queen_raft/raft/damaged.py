"""Damaged data on this node's disk: what a node refuses to start (or to go on) with.

A journal record whose checksum does not match, a journal shorter than its header says, a record
length that points outside the journal, a `.meta` that is empty or not what the node wrote, or a
snapshot that cannot be loaded: serving from any of them could answer with values the other replicas
never had, or forget a term and vote. The node stops instead, with sysexits' EX_DATAERR (65), and
says which file, where in it, and how to recover: this node's copy is lost, the other replicas hold
everything acknowledged (a majority flushed it), so wiping this node's data dir and restarting the
node makes it re-sync from them.

Raised while a group loads (the node then exits 65 before serving), and while running when an entry
read back from the journal fails its checksum (`report_runtime_damage`: the node stops and exits 65).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# sysexits.h EX_DATAERR: the input data was incorrect in some way.
EXIT_DAMAGED_DATA = 65

RECOVERY_STEP = ("wipe this node's data dir and restart it; it re-syncs from the others "
                 "(they hold every acknowledged entry)")


class DamagedDataError(Exception):
    """A file of this node's data dir is damaged: `file`, the byte `offset` where, and `detail`."""

    def __init__(self, file: str, offset: int, detail: str) -> None:
        self.file = file
        self.offset = offset
        self.detail = detail
        super().__init__(f"damaged data in {file} at byte offset {offset}: {detail}; to recover: {RECOVERY_STEP}")


_listeners_lock = threading.Lock()
_listeners: list[Callable[[DamagedDataError], None]] = []
_reported: list[DamagedDataError] = []


def on_runtime_damage(listener: Callable[[DamagedDataError], None]) -> None:
    """Call listener(error) (from any thread) when damage is found after startup; the node stops."""
    with _listeners_lock:
        _listeners.append(listener)


def remove_runtime_damage_listener(listener: Callable[[DamagedDataError], None]) -> None:
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


def report_runtime_damage(error: DamagedDataError) -> None:
    """Log (CRITICAL, once per file) and tell the listeners; the caller then raises `error`."""
    with _listeners_lock:
        first = not any(seen.file == error.file for seen in _reported)
        _reported.append(error)
        listeners = list(_listeners)
    if first:
        log.critical("%s", error)
    for listener in listeners:
        try:
            listener(error)
        except Exception:
            log.exception("a damaged-data listener failed")


def exit_code_for(error: BaseException) -> int | None:
    """The process exit code for an error that ended a node's start or run; None: not ours to map."""
    if isinstance(error, DamagedDataError):
        return EXIT_DAMAGED_DATA
    return None
