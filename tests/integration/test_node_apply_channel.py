"""A node wakes its long polls through its groups' one applied-event channel (TenantGroup.on_applied):
the state is the plain TenantState, and every apply (a proposal's, a tick's) moves the tenant's
apply signal. One in-process node of one tenant on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import pytest

from cluster_fixture import pick_port_runs
from queen_raft.config import parse_config
from queen_raft.node import build_node
from queen_raft.state import TenantState

pytestmark = pytest.mark.integration

SELF_ELECTION_WAIT_S = 5.0
APPLY_WAIT_S = 5.0


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def one_node_config(data_dir: str):
    http_port, raft_port = pick_port_runs(2, 1)
    return parse_config({
        "cluster": {"name": "apply-channel", "data_dir": data_dir},
        "settings": {"raft_password": "apply-channel-test-password"},
        "nodes": [{"id": "n1", "host": "127.0.0.1", "http_port": http_port, "raft_port": raft_port}],
        "tenants": [{"name": "acme", "tokens": [{"token": "acme-admin", "level": "admin"}]}],
    }, env={})


async def test_every_apply_moves_the_tenants_apply_signal_through_the_group(tmp_path):
    process = build_node(one_node_config(str(tmp_path)), "n1")
    group, signal = process.groups["acme"], process.serving.apply_signals["acme"]
    try:
        assert type(group.peek_local(lambda state: state)) is TenantState
        assert group.on_applied == signal.notify_threadsafe
        loop = asyncio.get_running_loop()
        signal.bind(loop)
        group.start_tick_loop(loop)
        await wait_until(lambda: group.is_leader, SELF_ELECTION_WAIT_S)
        before = signal.generation
        await group.propose({"op": "timers", "producerSub": "s", "maxPending": None, "ops": [{
            "op": "schedule", "queue": "q", "timerKey": "k", "partition": "Default", "delayMs": 50,
            "txn": "t1", "messageId": "m1", "payload": b"x", "payloadZstd": False, "encrypted": False}]})
        assert signal.generation > before  # the proposal's own apply
        after_schedule = signal.generation
        # The leader's tick fires the timer: its apply moves the signal too (a long poll wakes).
        await wait_until(lambda: group.peek_local(lambda s: s.counters()["pendingTimers"]) == 0, APPLY_WAIT_S)
        await wait_until(lambda: signal.generation > after_schedule, APPLY_WAIT_S)
        await group.stop()
    finally:
        for each in process.groups.values():
            each.destroy()
