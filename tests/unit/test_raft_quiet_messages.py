"""Raft messages that carry nothing new are left out (queen_raft/raft/quiet_messages.py): the
leader's commit-only AppendEntries that repeats what its coalesced send carried, and a follower's
answer that repeats its last one.

A CoalescingSyncObj without sockets or threads: pysyncobj's own tick, handlers and a group-commit
journal on a file, with GroupTransport's hold in front of a send that only records.
"""

from __future__ import annotations

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE
from pysyncobj.transport import TCPTransport, Transport

from queen_raft.raft import quiet_messages
from queen_raft.raft.journal_factory import install_journal_factory, register_journal, unregister_journal
from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.quiet_messages import ANSWER_REPEAT_WINDOW_PERIODS, answer_window_s
from queen_raft.raft.transport import GroupTransport

ADDRS = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
PERIOD_S = 0.05  # appendEntriesPeriod, as the group runs it
COMMAND = bytes([_COMMAND_TYPE.NO_OP]) + b"a command"  # applies as nothing


class Member:
    """One group member; `sent` holds (peer address, message) as they left the group-commit hold."""

    def __init__(self, tmp_path, monkeypatch, self_index: int):
        self.sent: list[tuple[str, dict]] = []
        monkeypatch.setattr(TCPTransport, "send", lambda transport, node, message: self.sent.append((node.address, message)) or True)
        monkeypatch.setattr(TCPTransport, "_onTick", lambda transport: None)
        monkeypatch.setattr(TCPTransport, "destroy", lambda transport: None)
        self.path = str(tmp_path / f"raft{self_index}.journal")
        install_journal_factory()
        register_journal(self.path, "group", None)
        conf = SyncObjConf(autoTick=False, appendEntriesUseBatch=False, journalFile=self.path,
                           appendEntriesPeriod=PERIOD_S, raftMinTimeout=0.4, raftMaxTimeout=1.4)
        others = [a for i, a in enumerate(ADDRS) if i != self_index]
        self.syncobj = CoalescingSyncObj(ADDRS[self_index], others, conf=conf, transportClass=self._transport)
        self.peers = {node.address: node for node in self.syncobj._SyncObj__otherNodes}

    def _transport(self, syncobj, self_node, other_nodes):
        transport = object.__new__(GroupTransport)
        Transport.__init__(transport, syncobj, self_node, other_nodes)
        transport.group_commit_journal = transport.journal = syncobj._SyncObj__raftLog
        transport.compaction_requests = 0
        transport._held = {}
        transport._nodes = set(other_nodes)
        transport._connections = {}
        transport._syncObj = syncobj
        transport._ready = True
        self.transport = transport
        return transport

    def take(self, kind: str) -> list[tuple[str, dict]]:
        """The messages of this type sent since the last take, oldest first."""
        taken = [(addr, m) for addr, m in self.sent if m["type"] == kind]
        self.sent = [(addr, m) for addr, m in self.sent if m["type"] != kind]
        return taken

    def receive(self, addr: str, message: dict) -> None:
        self.syncobj._SyncObj__onMessageReceived(self.peers[addr], message)

    def close(self) -> None:
        self.syncobj.destroy()
        unregister_journal(self.path)


@pytest.fixture
def members(tmp_path, monkeypatch):
    made = []

    def make(self_index: int) -> Member:
        member = Member(tmp_path, monkeypatch, self_index)
        made.append(member)
        return member

    yield make
    for member in made:
        member.close()


# -- the leader -----------------------------------------------------------------------------------


class Leader:
    def __init__(self, member: Member):
        self.m = member
        so = member.syncobj
        for node in so._SyncObj__otherNodes:
            so._SyncObj__onNodeConnected(node)
        so._SyncObj__setCurrentTerm(1, None)
        so._SyncObj__onBecomeLeader()
        # Stock sends twice on becoming leader; the second repeats the first.
        assert so.append_entries_skipped == 2
        self.tick()
        self.acknowledge_all()
        self.tick()  # commits the no-op; the commit-only message tells the followers
        self.acknowledge_all()
        member.sent.clear()
        so.append_entries_skipped = 0

    @property
    def so(self):
        return self.m.syncobj

    def tick(self) -> None:
        self.so._onTick(0)
        self.m.transport.flush_and_release()

    def acknowledge_all(self) -> None:
        last = self.so._SyncObj__getCurrentLogIndex()
        for addr in self.m.peers:
            self.m.receive(addr, {"type": "next_node_idx", "next_node_idx": last + 1, "success": True, "reset": False})

    def propose(self) -> None:
        self.so._applyCommand(COMMAND, None)

    def heartbeat_not_due(self) -> None:
        self.so._SyncObj__newAppendEntriesTime = quiet_messages.monotonic_time() + 60


@pytest.fixture
def leader(members):
    return Leader(members(0))


def test_a_lone_write_still_sends_the_commit_only_message_after_the_apply(leader):
    leader.propose()
    leader.tick()  # appended and sent
    sent = leader.m.take("append_entries")
    assert sorted(addr for addr, _ in sent) == ADDRS[1:] and all(m["entries"] for _, m in sent)
    commit_before = leader.so.raftCommitIndex

    leader.acknowledge_all()
    leader.heartbeat_not_due()
    leader.tick()  # commits and applies; nothing queued, so nothing else carried the new commit

    commit = leader.so.raftCommitIndex
    assert commit == commit_before + 1
    sent = leader.m.take("append_entries")
    assert sorted(addr for addr, _ in sent) == ADDRS[1:]
    assert all(m["commit_index"] == commit and m["entries"] == [] for _, m in sent)
    assert leader.so.append_entries_skipped == 0


def test_the_post_apply_send_is_left_out_when_the_coalesced_send_carried_the_commit(leader):
    leader.propose()
    leader.tick()
    leader.acknowledge_all()
    leader.m.take("append_entries")
    leader.propose()  # queued while the first entry commits
    leader.heartbeat_not_due()

    leader.tick()

    commit = leader.so.raftCommitIndex
    sent = leader.m.take("append_entries")
    # One message per follower in this tick: the new entry, with the new commit index.
    assert sorted(addr for addr, _ in sent) == ADDRS[1:], sent
    assert all(len(m["entries"]) == 1 and m["commit_index"] == commit for _, m in sent)
    assert leader.so.append_entries_skipped == 2  # stock sent each follower one more, empty


def test_the_periodic_heartbeat_goes_even_with_nothing_new(leader):
    leader.heartbeat_not_due()
    leader.so._SyncObj__sendAppendEntries()
    assert leader.m.take("append_entries") == [] and leader.so.append_entries_skipped == 2
    heartbeat_at = leader.so._SyncObj__newAppendEntriesTime
    assert heartbeat_at > quiet_messages.monotonic_time()  # a skipped send leaves it where it was

    leader.so._SyncObj__newAppendEntriesTime = 0  # due
    leader.tick()

    sent = leader.m.take("append_entries")
    assert sorted(addr for addr, _ in sent) == ADDRS[1:]
    assert leader.so._SyncObj__newAppendEntriesTime > heartbeat_at - 60  # the heartbeat re-armed it


@pytest.mark.parametrize("change", ["lagging follower", "reconnected follower", "new commit index", "new term"])
def test_a_send_goes_to_every_follower_when_one_of_them_needs_it(leader, change):
    so = leader.so
    follower = leader.m.peers[ADDRS[2]]
    if change == "lagging follower":
        so._SyncObj__raftNextIndex[follower] = so._SyncObj__getCurrentLogIndex()
    elif change == "reconnected follower":
        so._SyncObj__onNodeDisconnected(follower)
        so._SyncObj__onNodeConnected(follower)
    elif change == "new commit index":
        so._commit_sent[follower] = (so.raftCurrentTerm, so.raftCommitIndex - 1)
    else:
        so._SyncObj__raftCurrentTerm += 1
    leader.heartbeat_not_due()

    so._SyncObj__sendAppendEntries()

    assert sorted(addr for addr, _ in leader.m.take("append_entries")) == ADDRS[1:]
    assert so.append_entries_skipped == 0


def test_a_disconnected_follower_is_sent_nothing_as_stock_and_does_not_stop_the_skip(leader):
    so = leader.so
    so._SyncObj__onNodeDisconnected(leader.m.peers[ADDRS[2]])
    leader.heartbeat_not_due()
    so._SyncObj__sendAppendEntries()
    assert leader.m.take("append_entries") == [] and so.append_entries_skipped == 1


# -- the follower ---------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def follower(members, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(quiet_messages, "monotonic_time", clock)
    member = members(1)
    member.clock = clock
    return member


LEADER_ADDR = ADDRS[0]
NOOP = (bytes([_COMMAND_TYPE.NO_OP]), 1, 0)


def entry(idx: int, term: int = 1) -> tuple:
    return (COMMAND + str(idx).encode(), idx, term)


def append(member: Member, prev_idx: int, prev_term: int, entries: list, commit: int = 0, term: int = 1) -> None:
    member.receive(LEADER_ADDR, {"type": "append_entries", "term": term, "commit_index": commit,
                                 "entries": entries, "prevLogIdx": prev_idx, "prevLogTerm": prev_term})


def answers(member: Member) -> list[tuple]:
    member.transport.flush_and_release()
    return [(m["next_node_idx"], m["success"], m["reset"]) for _, m in member.take("next_node_idx")]


def test_an_answer_that_repeats_the_last_one_is_left_out_within_the_window(follower):
    append(follower, 1, 0, [entry(2)])
    assert answers(follower) == [(3, True, False)]
    follower.clock.now += 0.001
    append(follower, 2, 1, [], commit=2)  # commit-only: the same answer again
    assert answers(follower) == []
    assert follower.syncobj.answers_skipped == 1
    assert follower.syncobj.raftCommitIndex == 2  # the message itself was handled


def test_the_answer_to_entries_is_never_left_out_and_still_waits_for_the_flush(follower):
    append(follower, 1, 0, [entry(2)])
    append(follower, 1, 0, [entry(2)])  # a resend of held entries: same answer, but it carried entries
    append(follower, 2, 1, [])  # right behind them, before the flush: a repeat, left out
    assert follower.take("next_node_idx") == []  # held behind the journal flush
    assert answers(follower) == [(3, True, False)]  # the run of held answers goes as its newest
    assert follower.syncobj.answers_skipped == 1


def test_a_failure_is_never_left_out(follower):
    for _ in range(3):
        append(follower, 5, 1, [])  # the follower lacks entry 5: the leader must go back
        follower.clock.now += 0.001
    assert answers(follower) == [(2, False, True)] * 3
    append(follower, 1, 0, [])
    append(follower, 1, 0, [])  # after a failure, the first success goes; its repeat does not
    assert answers(follower) == [(2, True, False)]
    assert follower.syncobj.answers_skipped == 1


def test_a_new_next_index_or_a_new_term_answers(follower):
    append(follower, 1, 0, [entry(2)])
    assert answers(follower) == [(3, True, False)]
    append(follower, 2, 1, [])
    assert answers(follower) == []
    append(follower, 2, 1, [], term=2)  # a new leader term at the same index
    assert answers(follower) == [(3, True, False)]
    append(follower, 1, 0, [], term=2)  # an older prevLogIdx: a different next index
    assert answers(follower) == [(2, True, False)]


def test_a_link_made_again_starts_without_a_record(follower):
    append(follower, 1, 0, [])
    assert answers(follower) == [(2, True, False)]
    follower.syncobj._SyncObj__onNodeDisconnected(follower.peers[LEADER_ADDR])
    follower.syncobj._SyncObj__onNodeConnected(follower.peers[LEADER_ADDR])
    append(follower, 1, 0, [])
    assert answers(follower) == [(2, True, False)]
    assert follower.syncobj.answers_skipped == 0


@pytest.mark.parametrize("every_s", [PERIOD_S * 2, PERIOD_S * 1.1, PERIOD_S, PERIOD_S * 0.6, PERIOD_S / 3, PERIOD_S / 10])
def test_heartbeats_get_an_answer_at_least_every_two_periods(follower, every_s):
    answered_at = []
    for _ in range(200):
        append(follower, 1, 0, [])
        if answers(follower):
            answered_at.append(follower.clock.now)
        follower.clock.now += every_s
    gaps = [b - a for a, b in zip(answered_at, answered_at[1:])]
    window_s = ANSWER_REPEAT_WINDOW_PERIODS * PERIOD_S
    # The first heartbeat past the window is answered: the leader hears the follower that often.
    assert max(gaps) <= window_s + every_s + 1e-9, gaps
    if every_s >= 2 * PERIOD_S:
        assert len(answered_at) == 200  # heartbeats further apart than the window: every one answered
    else:
        assert min(gaps) >= window_s - 1e-9  # the rest were repeats
        assert follower.syncobj.answers_skipped == 200 - len(answered_at) > 0
    if every_s == PERIOD_S:
        assert len(answered_at) == 100  # an idle group's heartbeats: every other one answered


def test_the_answer_window_stays_well_inside_the_leader_fallback_timeout():
    assert answer_window_s(0.05, 2.5) == pytest.approx(ANSWER_REPEAT_WINDOW_PERIODS * 0.05)
    # A fallback timeout configured close to the heartbeat period: the window shrinks with it.
    assert answer_window_s(0.05, 0.2) == pytest.approx(0.04)
    assert answer_window_s(0.05, 0.2) <= 0.2 / 5 + 1e-12
