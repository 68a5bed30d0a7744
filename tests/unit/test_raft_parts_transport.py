"""The Raft layer's parts alone, what a member sends: the transport's group-commit holding
(acknowledgements held until the flush, a run of them sent as the newest), its per-tick work (the
slow checks once an interval, a compaction forced past the byte bound) and the leader's coalesced
AppendEntries sends (leader_append.py)."""

from __future__ import annotations


import pytest
from pysyncobj.transport import TCPTransport

from queen_raft.raft.transport import GroupTransport


# -- group commit in the transport ------------------------------------------------------------------------


class FakeJournal:
    def __init__(self):
        self.dirty = False
        self.flushes = 0
        self.size_bytes = 0

    def flush_if_dirty(self):
        if self.dirty:
            self.dirty = False
            self.flushes += 1


def bare_transport(monkeypatch, journal):
    """A GroupTransport without sockets: the stock send and _onTick record what they are given."""
    transport = object.__new__(GroupTransport)
    transport.group_commit_journal = journal
    transport.journal = journal
    transport.compaction_requests = 0
    transport._held = {}
    transport._nodes = {"peer"}
    transport._connections = {}
    sent, ticks = [], []
    monkeypatch.setattr(TCPTransport, "send", lambda self, node, message: sent.append((node, message)) or True)
    monkeypatch.setattr(TCPTransport, "_onTick", lambda self: ticks.append(journal.flushes))
    return transport, sent, ticks


def test_acknowledgements_wait_for_the_flush_and_keep_their_order(monkeypatch):
    journal = FakeJournal()
    transport, sent, ticks = bare_transport(monkeypatch, journal)
    vote = {"type": "response_vote", "term": 2}
    transport.send("leader", vote)
    assert sent == [("leader", vote)]  # nothing dirty: straight through

    journal.dirty = True
    ack = {"type": "next_node_idx", "next_node_idx": 5, "success": True}
    later = {"type": "apply_command", "command": b"x"}
    transport.send("leader", ack)
    transport.send("leader", later)  # behind a held ack: held too, order per link
    assert sent == [("leader", vote)]
    assert transport.held_count() == 2

    transport._onTick()
    assert journal.flushes == 1 and ticks == [1]  # flushed before the stock tick work
    assert sent == [("leader", vote), ("leader", ack), ("leader", later)]
    assert transport.held_count() == 0


def test_without_group_commit_nothing_is_held(monkeypatch):
    transport, sent, _ = bare_transport(monkeypatch, FakeJournal())
    transport.group_commit_journal = None
    transport.send("leader", {"type": "next_node_idx"})
    assert len(sent) == 1


def test_a_run_of_held_successful_acknowledgements_sends_only_the_newest(monkeypatch):
    journal = FakeJournal()
    transport, sent, _ = bare_transport(monkeypatch, journal)
    journal.dirty = True
    acks = [{"type": "next_node_idx", "next_node_idx": idx, "reset": False, "success": True} for idx in (5, 6, 8)]
    for ack in acks:
        transport.send("leader", ack)
    assert transport.held_count() == 1
    transport._onTick()
    assert sent == [("leader", acks[-1])]


@pytest.mark.parametrize("second", [
    {"type": "next_node_idx", "next_node_idx": 9, "reset": True, "success": True},  # a reset moves nextIndex back
    {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": False},  # a failure is not an ack of 9
    {"type": "next_node_idx", "next_node_idx": 4, "reset": False, "success": True},  # lower: the leader keeps 5
])
def test_held_acknowledgements_that_say_more_than_the_newest_are_all_sent(monkeypatch, second):
    journal = FakeJournal()
    transport, sent, _ = bare_transport(monkeypatch, journal)
    journal.dirty = True
    first = {"type": "next_node_idx", "next_node_idx": 5, "reset": False, "success": True}
    transport.send("leader", first)
    transport.send("leader", second)
    transport._onTick()
    assert sent == [("leader", first), ("leader", second)]


def test_every_tick_flushes_and_releases_but_the_slow_checks_run_once_an_interval(monkeypatch):
    """Under writes pysyncobj ticks on every message: the group-commit flush and release stay on
    every tick, while the checks that watch for slow events run once per HOUSEKEEPING_INTERVAL_S."""
    from queen_raft.raft import transport as transport_module

    now = [1000.0]
    monkeypatch.setattr(transport_module, "monotonic_time", lambda: now[0])
    journal = FakeJournal()
    transport, sent, ticks = bare_transport(monkeypatch, journal)
    checks = []
    for name in ("_keep_listening", "_close_expired_handshakes", "_report_refusals", "_trim_heap_after_a_burst"):
        monkeypatch.setattr(transport, name, lambda at, name=name: checks.append((name, at)))
    ack = {"type": "next_node_idx", "next_node_idx": 5, "success": True}
    for step in range(3):
        journal.dirty = True
        transport.send("leader", ack)
        transport._onTick()
        assert journal.flushes == step + 1 and len(sent) == step + 1  # flushed and released each tick
        now[0] += transport_module.HOUSEKEEPING_INTERVAL_S / 3
    assert [at for _, at in checks] == [1000.0] * 4  # once, in the first tick
    now[0] = 1000.0 + transport_module.HOUSEKEEPING_INTERVAL_S
    transport._onTick()
    assert len(checks) == 8 and len(ticks) == 4


def test_a_log_over_the_byte_bound_forces_a_compaction(monkeypatch):
    from queen_raft.raft.settings import LOG_COMPACTION_MAX_BYTES

    journal = FakeJournal()
    transport, _, _ = bare_transport(monkeypatch, journal)
    forced = []
    transport._syncObj = type("FakeSyncObj", (), {"forceLogCompaction": lambda self: forced.append(True)})()
    journal.size_bytes = LOG_COMPACTION_MAX_BYTES
    transport._onTick()
    assert forced == []
    journal.size_bytes = LOG_COMPACTION_MAX_BYTES + 1
    transport._onTick()
    assert forced == [True] and transport.compaction_requests == 1


# -- the leader's coalesced AppendEntries sends (leader_append.py) -----------------------------------------


def coalescing_syncobj(monkeypatch, appends_per_run):
    """A CoalescingSyncObj without sockets: the stock check 'appends' n commands, each asking for a
    send as stock does; the stock send records that it ran."""
    from pysyncobj import SyncObj

    from queen_raft.raft.leader_append import CoalescingSyncObj
    from queen_raft.raft.quiet_messages import QuietMessagesSyncObj

    syncobj = object.__new__(CoalescingSyncObj)
    syncobj._coalescing_appends = False
    syncobj._appends_waiting = 0
    syncobj.append_sends_coalesced = 0
    sends = []

    def stock_check(self):
        for i in range(appends_per_run):
            self._SyncObj__sendAppendEntries()

    monkeypatch.setattr(SyncObj, "_checkCommandsToApply", stock_check)
    monkeypatch.setattr(SyncObj, "_SyncObj__sendAppendEntries", lambda self: sends.append(self._appends_waiting))
    # Every send here carries new entries: none is a repeat that quiet_messages.py would leave out.
    monkeypatch.setattr(QuietMessagesSyncObj, "_followers_needing_nothing", lambda self: None)
    monkeypatch.setattr(QuietMessagesSyncObj, "_note_commit_sent", lambda self: None)
    return syncobj, sends


@pytest.mark.parametrize("appends, sends_expected", [(0, 0), (1, 1), (3, 1), (64, 1), (65, 2), (130, 3)])
def test_the_leader_sends_once_per_batch_of_appends_and_at_least_every_64(monkeypatch, appends, sends_expected):
    from queen_raft.raft.leader_append import APPEND_SEND_EVERY_ENTRIES

    assert APPEND_SEND_EVERY_ENTRIES == 64
    syncobj, sends = coalescing_syncobj(monkeypatch, appends)
    syncobj._checkCommandsToApply()
    assert len(sends) == sends_expected
    assert syncobj.append_sends_coalesced == appends - sends_expected
    assert not syncobj._coalescing_appends and syncobj._appends_waiting == 0


def test_sends_outside_the_command_check_go_at_once(monkeypatch):
    # Heartbeats and the send after an apply (commit index) are never held back.
    syncobj, sends = coalescing_syncobj(monkeypatch, 0)
    syncobj._SyncObj__sendAppendEntries()
    syncobj._SyncObj__sendAppendEntries()
    assert len(sends) == 2 and syncobj.append_sends_coalesced == 0
