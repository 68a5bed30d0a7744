"""Memory of a real in-process group: the journal's pages leave the resident set once
flushed, and the heap is trimmed once a burst of writes went quiet."""

from __future__ import annotations

import asyncio
import itertools
import mmap
import time

import pytest

from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.raft.journal import RELEASE_STEP_BYTES, RESIDENT_TAIL_BYTES
from queen_raft.raft.settings import HEAP_TRIM_AFTER_LOG_BYTES, HEAP_TRIM_IDLE_S
from queen_raft.raft.transport import HeapTrimmer
from raft_test_state import TimerLogState
from port_blocks import worker_port

pytestmark = pytest.mark.integration

_PORTS = itertools.count(worker_port(17900))
SELF_ELECTION_WAIT_S = 5.0
VALUE_BYTES = 64 * 1024
# Enough 64 KiB entries to pass the trim's burst threshold with room to spare.
ENTRIES = HEAP_TRIM_AFTER_LOG_BYTES // VALUE_BYTES + 16


def mapped_rss_bytes(path: str) -> int:
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                inside = len(fields) > 5 and fields[5] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_a_burst_of_writes_leaves_the_journal_unmapped_and_trims_the_heap_when_quiet(tmp_path):
    port = next(_PORTS)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path / "g"), RaftSettings(fsync="group"),
                        TimerLogState, TimerLogState.restore)
    trims: list[int] = []
    transport = group._transport
    transport.heap_trimmer = HeapTrimmer(min_interval_s=0.0, trim=trims.append)
    try:
        group.start_tick_loop(asyncio.get_running_loop())
        await wait_until(lambda: group.is_leader, SELF_ELECTION_WAIT_S)
        for i in range(ENTRIES):
            await group.propose({"op": "set", "key": "k", "value": bytes([i % 256]) * VALUE_BYTES})
        # When the burst has been quiet for HEAP_TRIM_IDLE_S (unit-tested: never while appending).
        await wait_until(lambda: trims, HEAP_TRIM_IDLE_S + 3.0)
        assert trims == [0]
        journal = transport.journal
        assert journal.bytes_appended >= ENTRIES * VALUE_BYTES
        assert mapped_rss_bytes(group.journal_file) <= RESIDENT_TAIL_BYTES + RELEASE_STEP_BYTES + VALUE_BYTES + 2 * mmap.PAGESIZE
        assert group.peek_local(lambda state: state.values["k"]) == bytes([(ENTRIES - 1) % 256]) * VALUE_BYTES
        await group.stop()
    finally:
        group.destroy()
