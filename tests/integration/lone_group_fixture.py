"""One TenantGroup in this process (real sockets on 127.0.0.1, real pysyncobj threads) per call of the
`groups` fixture, on ports counted up from 17500, and the waits the in-process group tests share
(test_raft_group_inprocess.py, test_raft_group_tick_timing.py, test_raft_group_links.py and others).

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from queen_raft.raft import RaftSettings, TenantGroup
from raft_test_state import TimerLogState
from port_blocks import worker_port

_PORTS = itertools.count(worker_port(17500))
# A lone node elects itself after one election timeout (0.2-0.6 s).
SELF_ELECTION_WAIT_S = 5.0


@pytest.fixture
def groups(tmp_path):
    made: list[TenantGroup] = []

    def make(settings: RaftSettings, peers: list[str] | None = None, port: int | None = None, **kwargs) -> TenantGroup:
        port = port or next(_PORTS)
        addr = f"127.0.0.1:{port}"
        group = TenantGroup(f"t{port}", addr, [addr] + (peers or []), str(tmp_path / str(port)), settings,
                            TimerLogState, TimerLogState.restore, **kwargs)
        made.append(group)
        return group

    yield make
    for group in made:
        group.destroy()


async def started(group: TenantGroup) -> TenantGroup:
    group.start_tick_loop(asyncio.get_running_loop())
    deadline = time.monotonic() + SELF_ELECTION_WAIT_S
    while not group.is_leader:
        assert time.monotonic() < deadline, "the lone node never became leader"
        await asyncio.sleep(0.01)
    return group


def record_ticks(group: TenantGroup) -> list[tuple[float, dict]]:
    ticks: list[tuple[float, dict]] = []
    loop = asyncio.get_running_loop()
    group.on_tick_result = lambda result, lags: ticks.append((loop.time(), result))
    return ticks


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
