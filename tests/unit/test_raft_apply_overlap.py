"""The next commit round travels while a replica applies: before a tick applies committed entries,
the leader appends (and sends) the commands queued meanwhile, and every node flushes its journal and
releases the acknowledgements held behind that flush (queen_raft/raft/leader_append.py)."""

from __future__ import annotations

from pysyncobj import SyncObj
from pysyncobj.transport import TCPTransport

from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.transport import GroupTransport

ACK = {"type": "next_node_idx", "next_node_idx": 7, "success": True}


class FakeJournal:
    def __init__(self):
        self.dirty = False
        self.flushes = 0

    def flush_if_dirty(self):
        if self.dirty:
            self.dirty = False
            self.flushes += 1


def syncobj_in_a_tick(monkeypatch, commit_index: int, last_applied: int):
    """A CoalescingSyncObj without sockets or threads, an acknowledgement held behind an unflushed
    append, and the stock apply, append and send recording what had happened when each ran."""
    journal = FakeJournal()
    transport = object.__new__(GroupTransport)
    transport.group_commit_journal = journal
    transport.journal = journal
    transport._held = {}
    transport._ready = True
    transport._connections = {}
    sent, events = [], []
    monkeypatch.setattr(TCPTransport, "send", lambda self, node, message: sent.append((node, message)) or True)
    journal.dirty = True
    transport.send("leader", ACK)
    syncobj = object.__new__(CoalescingSyncObj)
    syncobj._SyncObj__transport = transport
    syncobj._SyncObj__raftCommitIndex = commit_index
    syncobj._SyncObj__raftLastApplied = last_applied
    monkeypatch.setattr(CoalescingSyncObj, "_checkCommandsToApply", lambda self: events.append("append queued"))

    def stock_apply(self):
        events.append(("apply", list(sent), journal.flushes))
        return False

    monkeypatch.setattr(SyncObj, "_SyncObj__applyLogEntries", stock_apply)
    return syncobj, journal, sent, events


def test_queued_commands_and_held_acknowledgements_go_out_before_the_apply(monkeypatch):
    syncobj, journal, sent, events = syncobj_in_a_tick(monkeypatch, commit_index=5, last_applied=3)
    assert sent == []  # held: the append it acknowledges is not flushed yet

    assert syncobj._SyncObj__applyLogEntries() is False

    # The apply found the journal flushed once, the acknowledgement on its way and the queued
    # commands appended: the leader's next commit round no longer waits for this apply.
    assert events == ["append queued", ("apply", [("leader", ACK)], 1)]
    assert journal.flushes == 1


def test_a_tick_with_nothing_to_apply_leaves_the_flush_to_the_tick_end(monkeypatch):
    syncobj, journal, sent, events = syncobj_in_a_tick(monkeypatch, commit_index=3, last_applied=3)

    syncobj._SyncObj__applyLogEntries()

    # Nothing committed to apply: nothing to overlap, so no extra flush (one per tick stays the rule).
    assert events == [("apply", [], 0)]
    assert sent == [] and journal.dirty
