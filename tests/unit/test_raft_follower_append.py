"""The follower's append_entries handler (follower_append.LogMatchingSyncObj), driven directly.

A SyncObj without sockets: pysyncobj's own handler and journal (a GroupCommitJournal on a file),
with our GroupTransport's group-commit hold in front of a send that only records. Each test builds
the follower's log with leader messages, then sends overlapping, identical or conflicting ranges and
checks the journal (in memory and as a fresh load reads the file back), the deletions the journal was
asked for, the acknowledgements and the commit index.
"""

from __future__ import annotations

import logging

import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE
from pysyncobj.transport import Transport, TCPTransport

from queen_raft.raft.follower_append import LogMatchingSyncObj, count_held_prefix
from queen_raft.raft.journal import CompactionGuardedJournal, GroupCommitJournal
from queen_raft.raft.journal_factory import install_journal_factory, register_journal, unregister_journal
from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.transport import GroupTransport

SELF_ADDR, LEADER_ADDR, OTHER_ADDR = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
LEADER = TCPNode(LEADER_ADDR)


def entry(idx: int, term: int) -> tuple:
    # A no-op command (applies as nothing) that still says which entry it is.
    return (bytes([_COMMAND_TYPE.NO_OP]) + f"entry {idx} of term {term}".encode(), idx, term)


def entries(first: int, last: int, term: int) -> list:
    return [entry(i, term) for i in range(first, last + 1)]


class Follower:
    """One follower node and what it sent; `recorded` are messages that left the group-commit hold."""

    def __init__(self, tmp_path, monkeypatch, syncobj_class=LogMatchingSyncObj):
        self.recorded: list[dict] = []
        monkeypatch.setattr(TCPTransport, "send", lambda transport, node, message: self.recorded.append(message) or True)
        monkeypatch.setattr(TCPTransport, "_onTick", lambda transport: None)
        monkeypatch.setattr(TCPTransport, "destroy", lambda transport: None)
        self.path = str(tmp_path / "raft.journal")
        install_journal_factory()
        register_journal(self.path, "group", None)
        conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=False, journalFile=self.path)
        self.syncobj = syncobj_class(SELF_ADDR, [LEADER_ADDR, OTHER_ADDR], conf=conf, transportClass=self._transport)
        self.journal: GroupCommitJournal = self.syncobj._SyncObj__raftLog
        assert isinstance(self.journal, GroupCommitJournal)
        self.deletions: list[int] = []  # positions handed to deleteEntriesFrom
        delete_from = self.journal.deleteEntriesFrom
        self.journal.deleteEntriesFrom = lambda position: (self.deletions.append(position), delete_from(position))

    def _transport(self, syncobj, self_node, other_nodes):
        # GroupTransport's send/_onTick (the hold), without TCPTransport's sockets.
        transport = object.__new__(GroupTransport)
        Transport.__init__(transport, syncobj, self_node, other_nodes)
        journal = syncobj._SyncObj__raftLog
        transport.group_commit_journal = transport.journal = journal
        transport.compaction_requests = 0
        transport._held = {}
        transport._nodes = {LEADER, TCPNode(OTHER_ADDR)}
        transport._connections = {}
        transport._syncObj = syncobj
        transport._ready = True
        self.transport = transport
        return transport

    def append(self, prev_idx, prev_term, sent, term=1, commit=0) -> None:
        self.syncobj._SyncObj__onMessageReceived(LEADER, {
            "type": "append_entries", "term": term, "commit_index": commit,
            "entries": list(sent), "prevLogIdx": prev_idx, "prevLogTerm": prev_term,
        })

    def tick(self) -> None:
        """The part of a pysyncobj tick that matters here: apply what is committed, flush, release."""
        self.syncobj._SyncObj__applyLogEntries()
        self.transport._onTick()

    def log(self) -> list:
        return [tuple(e) for e in self.journal]

    def acks(self) -> list:
        return [(m["next_node_idx"], m["success"], m["reset"]) for m in self.recorded if m["type"] == "next_node_idx"]

    @property
    def commit_index(self) -> int:
        return self.syncobj.raftCommitIndex

    def close(self) -> list:
        """Destroy the node; the journal file as a fresh load finds it."""
        self.syncobj.destroy()
        unregister_journal(self.path)
        return [tuple(e) for e in CompactionGuardedJournal(self.path)]


@pytest.fixture
def follower(tmp_path, monkeypatch):
    node = Follower(tmp_path, monkeypatch)
    yield node
    unregister_journal(node.path)


FIRST = (bytes([_COMMAND_TYPE.NO_OP]), 1, 0)  # the no-op every fresh pysyncobj log starts with


def test_count_held_prefix_stops_at_the_first_difference_in_index_or_term():
    held = entries(4, 6, 1)
    assert count_held_prefix(held, entries(4, 8, 1)) == 3
    assert count_held_prefix(held, entries(4, 5, 1)) == 2
    assert count_held_prefix(held, [entry(4, 1), entry(5, 2), entry(6, 1)]) == 1
    assert count_held_prefix(held, [entry(5, 1)]) == 0  # index off by one: not the same entry
    assert count_held_prefix([], entries(4, 5, 1)) == 0 and count_held_prefix(held, []) == 0


def test_an_identical_resend_deletes_nothing_and_acks_the_same(follower):
    follower.append(1, 0, entries(2, 6, 1))
    follower.tick()
    flushes = follower.journal.flushes
    follower.append(1, 0, entries(2, 6, 1))

    assert follower.log() == [FIRST] + entries(2, 6, 1)
    assert follower.deletions == []
    assert not follower.journal.dirty, "a resend of held entries wrote to the journal"
    assert follower.acks() == [(7, True, False), (7, True, False)]
    assert follower.syncobj.held_entries_skipped == 5
    follower.tick()
    assert follower.journal.flushes == flushes  # nothing new to flush
    assert follower.close() == [FIRST] + entries(2, 6, 1)


def test_matching_the_log_reads_no_entry_from_the_journal(tmp_path, monkeypatch):
    """The step before the stock handler compares only indexes and terms: it decides a new append, a
    commit-only message, a resend, an overlap and a conflict without copying a command out of the
    journal and checking it (the group's SyncObj, whose last-index lookups read no entry either)."""
    follower = Follower(tmp_path, monkeypatch, CoalescingSyncObj)
    follower.append(1, 0, entries(2, 6, 1))
    follower.tick()
    reads = []
    entry_at = follower.journal.entry_at
    monkeypatch.setattr(follower.journal, "entry_at", lambda position: reads.append(position) or entry_at(position))

    def step(prev_idx, prev_term, sent, term=1):
        message = {"type": "append_entries", "term": term, "commit_index": 0, "entries": sent,
                   "prevLogIdx": prev_idx, "prevLogTerm": prev_term}
        return follower.syncobj._without_held_entries(LEADER, message)

    new = step(6, 1, entries(7, 8, 1))
    assert new["prevLogIdx"] == 6 and new["entries"] == entries(7, 8, 1)  # nothing held: as sent
    assert step(6, 1, [])["prevLogIdx"] == 6  # commit-only, at the log's end
    assert step(4, 1, []) is None  # commit-only, behind the log's end: answered here
    resend = step(1, 0, entries(2, 6, 1))
    assert (resend["prevLogIdx"], resend["entries"]) == (6, [])  # every entry held: none to add
    overlap = step(4, 1, entries(5, 8, 1))
    assert (overlap["prevLogIdx"], overlap["prevLogTerm"], overlap["entries"]) == (6, 1, entries(7, 8, 1))
    conflict = step(4, 1, entries(5, 5, 1) + entries(6, 7, 2), term=2)
    assert (conflict["prevLogIdx"], conflict["entries"]) == (5, entries(6, 7, 2))
    assert step(6, 2, entries(7, 7, 2), term=2)["prevLogTerm"] == 2  # prev term differs: stock's reset
    assert step(0, 0, entries(1, 1, 1)) is not None  # before the log's first entry: stock's answer
    assert reads == []
    follower.close()


@pytest.mark.parametrize("syncobj_class", [LogMatchingSyncObj, SyncObj])
def test_an_overlapping_range_appends_only_the_new_entries(tmp_path, monkeypatch, caplog, syncobj_class):
    """Entries 2..6 applied; the leader resends from 4 with 7..9 new. Stock SyncObj is here to show
    what this test catches: it deletes 4..6 (applied) and logs CRITICAL before re-adding them."""
    follower = Follower(tmp_path, monkeypatch, syncobj_class)
    follower.append(1, 0, entries(2, 6, 1), commit=6)
    follower.tick()
    assert follower.syncobj.raftLastApplied == 6

    with caplog.at_level(logging.CRITICAL):
        follower.append(3, 1, entries(4, 9, 1), commit=6)

    assert follower.log() == [FIRST] + entries(2, 9, 1)
    follower.tick()
    assert follower.acks()[-1] == (10, True, False)
    truncated = [r for r in caplog.records if "truncating already-applied" in r.getMessage()]
    if syncobj_class is SyncObj:
        assert follower.deletions == [3] and len(truncated) == 1
    else:
        assert follower.deletions == [] and truncated == []
        assert follower.syncobj.held_entries_skipped == 3 and follower.syncobj.overlaps_kept == 1
    assert follower.close() == [FIRST] + entries(2, 9, 1)


def test_an_older_range_inside_the_log_keeps_the_tail_and_commits_only_what_it_verified(follower):
    follower.append(1, 0, entries(2, 9, 1))
    follower.tick()

    # The leader's commit index is 9, but this message only shows that 1..4 equal the leader's log.
    follower.append(2, 1, entries(3, 4, 1), commit=9)
    assert follower.log() == [FIRST] + entries(2, 9, 1)
    assert follower.deletions == []
    assert follower.acks()[-1] == (5, True, False)
    assert follower.commit_index == 4
    assert follower.syncobj._SyncObj__leaderCommitIndex == 9  # what the leader said, uncapped

    # A heartbeat behind the log's end: stock deleted 6..9 here.
    follower.append(5, 1, [], commit=9)
    assert follower.log() == [FIRST] + entries(2, 9, 1)
    assert follower.deletions == []
    assert follower.acks()[-1] == (6, True, False)
    assert follower.commit_index == 5
    assert follower.syncobj.overlaps_kept == 2

    follower.append(9, 1, [], commit=9)  # the leader's heartbeat at the log's end commits the rest
    assert follower.commit_index == 9 and follower.acks()[-1] == (10, True, False)
    follower.tick()
    assert follower.syncobj.raftLastApplied == 9
    assert follower.close() == [FIRST] + entries(2, 9, 1)


def test_a_conflict_truncates_from_the_first_conflicting_entry_only(follower):
    follower.append(1, 0, entries(2, 9, 1), commit=3)
    follower.tick()
    assert follower.syncobj.raftLastApplied == 3

    # A new leader (term 2) holds 1..5 of term 1, then its own 6..7: 4 and 5 are skipped, 6..9 of
    # term 1 (never committed) are replaced.
    follower.append(3, 1, entries(4, 5, 1) + entries(6, 7, 2), term=2, commit=3)
    expected = [FIRST] + entries(2, 5, 1) + entries(6, 7, 2)
    assert follower.log() == expected
    assert follower.deletions == [5]  # position of index 6 in a log starting at 1
    assert follower.syncobj.conflicts_truncated == 1 and follower.syncobj.held_entries_skipped == 2
    assert follower.syncobj.raftCurrentTerm == 2
    follower.tick()
    assert follower.acks()[-1] == (8, True, False)
    assert follower.close() == expected


def test_a_conflict_at_the_first_sent_entry_is_stock_raft(follower):
    follower.append(1, 0, entries(2, 5, 1))
    follower.append(3, 1, entries(4, 4, 2), term=2)
    assert follower.log() == [FIRST] + entries(2, 3, 1) + [entry(4, 2)]
    assert follower.deletions == [3]
    follower.tick()
    assert follower.acks()[-1] == (5, True, False)


def test_a_conflict_at_or_below_the_commit_index_is_refused_and_logged(follower, caplog):
    follower.append(1, 0, entries(2, 9, 1), commit=6)
    follower.tick()
    acks_before = len(follower.acks())

    with caplog.at_level(logging.CRITICAL, logger="queen_raft.raft.follower_append"):
        # Entry 6 is committed here as term 1; a leader that says term 2 breaks Raft's invariants.
        follower.append(4, 1, [entry(5, 1), entry(6, 2), entry(7, 2)], term=2, commit=7)

    assert follower.log() == [FIRST] + entries(2, 9, 1)
    assert follower.deletions == []
    assert follower.syncobj.conflicting_appends_refused == 1
    breaches = [r for r in caplog.records if r.levelno == logging.CRITICAL and "Raft invariant broken" in r.getMessage()]
    assert len(breaches) == 1 and "entry 6" in breaches[0].getMessage()
    follower.tick()
    assert follower.acks()[acks_before:] == [(10, False, False)]  # neither success nor reset
    assert follower.commit_index == 6  # nothing past the verified entry 5 was committed
    # It still takes the message as the leader's heartbeat: it follows, and does not start elections.
    assert follower.syncobj.raftCurrentTerm == 2 and follower.syncobj._getLeader() == LEADER
    assert follower.close() == [FIRST] + entries(2, 9, 1)


def test_acks_of_skipped_entries_wait_for_the_flush_that_covers_them(follower):
    follower.append(1, 0, entries(2, 6, 1))
    # Resent before any flush: nothing is added, but 2..6 are not durable yet, so the ack waits.
    follower.append(1, 0, entries(2, 6, 1))
    follower.append(2, 1, entries(3, 4, 1))  # answered by the override itself (tail kept)
    assert follower.journal.dirty and follower.acks() == []
    # The second ack of 7 says nothing the first did not: held once (transport._supersedes).
    assert follower.transport.held_count() == 2

    follower.tick()
    assert follower.journal.flushes == 1 and not follower.journal.dirty
    assert follower.acks() == [(7, True, False), (5, True, False)]

    # After the flush, a resend adds nothing and its ack leaves at once: what it covers is durable.
    follower.append(1, 0, entries(2, 6, 1))
    assert follower.acks()[-1] == (7, True, False) and follower.transport.held_count() == 0
    assert not follower.journal.dirty and follower.journal.flushes == 1

    # New entries behind held ones: the ack covering them waits again.
    follower.append(4, 1, entries(5, 8, 1))
    assert follower.journal.dirty and follower.transport.held_count() == 1
    follower.tick()
    assert follower.acks()[-1] == (9, True, False) and follower.journal.flushes == 2


def test_a_stale_term_and_a_missing_prev_entry_go_to_the_stock_answers(follower):
    follower.append(1, 0, entries(2, 4, 3), term=3)
    follower.tick()
    follower.append(1, 0, entries(2, 6, 2), term=2)  # an old leader: ignored, no answer
    assert follower.log() == [FIRST] + entries(2, 4, 3) and len(follower.acks()) == 1
    follower.append(8, 3, [entry(9, 3)], term=3)  # prevLogIdx past the end: reset
    follower.append(3, 2, [entry(4, 3)], term=3)  # prevLogTerm differs: reset to prevLogIdx
    follower.tick()
    assert follower.acks()[1:] == [(5, False, True), (3, False, True)]
    assert follower.log() == [FIRST] + entries(2, 4, 3) and follower.deletions == []


@pytest.mark.parametrize("serialized", [None, ("chunk", 0, False)], ids=["snapshot not ready", "a first chunk"])
def test_a_snapshot_message_commits_nothing_the_log_has_not_shown_to_match(follower, serialized):
    # A deposed leader's tail: 2..5 came from the group's leader of term 1 (committed through 3),
    # 6..7 it appended itself at term 2 while nobody heard it: the new leader (term 3) never had them.
    follower.append(1, 0, entries(2, 5, 1), commit=3)
    follower.syncobj._SyncObj__raftLog.add(*entry(6, 2))
    follower.syncobj._SyncObj__raftLog.add(*entry(7, 2))
    follower.tick()
    assert follower.commit_index == 3

    # The new leader, its log compacted past this node's, starts sending a snapshot: the message
    # carries its commit index (20) and no prevLogIdx, so nothing in it says which entries here match.
    follower.syncobj._SyncObj__onMessageReceived(LEADER, {
        "type": "append_entries", "term": 3, "commit_index": 20, "serialized": serialized})
    assert follower.commit_index == 3, "entries 4..7 were committed on a message that verified none of them"
    follower.tick()
    assert follower.syncobj.raftLastApplied == 3
    assert follower.syncobj._SyncObj__leaderCommitIndex == 20  # what the leader said, uncapped
