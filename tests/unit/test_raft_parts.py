"""The Raft layer's parts alone: clock, settings, journal durability, group-commit holding, the
replicated apply wrapper and the snapshot blob."""

from __future__ import annotations

import os
import pickle

import msgpack
import pytest
from pysyncobj.pickle import loads as pysyncobj_loads
from pysyncobj.transport import TCPTransport

from queen_raft import clock
from queen_raft.raft import RaftSettings
from queen_raft.raft.errors import GroupUnavailable
from queen_raft.raft.loopback import is_loopback_host
from queen_raft.raft.journal import (
    CompactionGuardedJournal,
    DurableMetaStorer,
    GroupCommitJournal,
)
from queen_raft.raft.journal_factory import create_journal, register_journal, unregister_journal
from queen_raft.raft.replicated_state import ReplicatedTenantState, SnapshotBlob, decode_command, encode_command
from queen_raft.raft.transport import GroupTransport

# -- clock -------------------------------------------------------------------------------------------


def test_clock_offset_without_test_hooks_is_refused():
    with pytest.raises(ValueError, match="QUEEN_TEST_HOOKS"):
        clock.offset_from_environment({"QUEEN_TEST_CLOCK_OFFSET_MS": "500"})
    assert clock.offset_from_environment({"QUEEN_TEST_CLOCK_OFFSET_MS": "500", "QUEEN_TEST_HOOKS": "1"}) == 500
    assert clock.offset_from_environment({}) == 0
    with pytest.raises(ValueError):
        clock.offset_from_environment({"QUEEN_TEST_CLOCK_OFFSET_MS": "soon", "QUEEN_TEST_HOOKS": "1"})


def test_wall_ms_follows_the_runtime_offset_only_with_hooks(monkeypatch):
    monkeypatch.delenv("QUEEN_TEST_HOOKS", raising=False)
    with pytest.raises(ValueError):
        clock.set_offset_ms(1000)
    monkeypatch.setenv("QUEEN_TEST_HOOKS", "1")
    try:
        clock.set_offset_ms(0)
        base = clock.wall_ms()
        clock.set_offset_ms(60_000)
        skewed = clock.wall_ms()
        assert 59_000 < skewed - base < 61_000
    finally:
        clock.set_offset_ms(0)


# -- settings -----------------------------------------------------------------------------------------


def test_settings_defaults_are_the_measured_ones_and_bad_values_are_refused():
    s = RaftSettings()
    assert (s.election_min_s, s.election_max_s, s.append_entries_period_s) == (0.2, 0.6, 0.05)
    assert s.leader_fallback_timeout_s == 2.5 and s.connection_retry_s == 0.5
    assert s.tick_policy == {
        "fireBatch": 256, "fireMaxBytes": 4 * 1024 * 1024, "maxAttempts": 5,
        "backoffMinMs": 1000, "backoffMaxMs": 60_000, "transientBackoffMs": 1000,
    }
    with pytest.raises(ValueError):
        RaftSettings(fsync="always")
    with pytest.raises(ValueError):
        RaftSettings(election_min_s=0.1, append_entries_period_s=0.05)  # pysyncobj needs > 3x
    with pytest.raises(ValueError):
        RaftSettings(max_in_flight=0)


def test_loopback_detection_decides_when_a_password_is_required():
    assert is_loopback_host("127.0.0.1") and is_loopback_host("localhost") and is_loopback_host("::1")
    assert not is_loopback_host("10.0.0.5") and not is_loopback_host("node1.example")


def test_group_unavailable_carries_reason_and_retry_after():
    exc = GroupUnavailable("no_leader")
    assert exc.reason == "no_leader" and exc.retry_after_s == 1.0
    assert GroupUnavailable("busy", 0.1).retry_after_s == 0.1


# -- journal -------------------------------------------------------------------------------------------


def test_group_commit_journal_marks_dirty_and_flushes_once(tmp_path):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    assert not journal.flush_if_dirty()
    journal.add(b"\x00a", 1, 1)
    journal.add(b"\x00b", 2, 1)
    assert journal.dirty
    assert journal.flush_if_dirty() and journal.flushes == 1
    assert not journal.flush_if_dirty()
    journal.deleteEntriesFrom(1)
    assert journal.dirty
    journal.flush_if_dirty()
    journal._destroy()
    reopened = CompactionGuardedJournal(str(tmp_path / "j"))
    assert [e[1] for e in reopened] == [1]


def test_term_and_vote_are_written_through_the_fsyncing_meta_storer(tmp_path):
    journal = GroupCommitJournal(str(tmp_path / "j"), None)
    assert isinstance(journal._FileJournal__metaStorer, DurableMetaStorer)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    with open(str(tmp_path / "j.meta"), "rb") as f:
        meta = pysyncobj_loads(f.read())
    assert meta["currentTerm"] == 7 and meta["votedForNodeId"] == "127.0.0.1:1"
    assert not os.path.exists(str(tmp_path / "j.meta.tmp"))


def test_compaction_past_the_end_of_the_log_is_refused(tmp_path):
    journal = CompactionGuardedJournal(str(tmp_path / "j"))
    for idx in (1, 2, 3):
        journal.add(b"\x00", idx, 1)
    journal.deleteEntriesTo(3)  # would empty the log: every tick would raise IndexError
    assert len(journal) == 3 and journal.compactions_refused == 1
    journal.deleteEntriesTo(2)
    assert [e[1] for e in journal] == [3]


def test_clearing_the_journal_in_group_mode_makes_the_snapshot_durable_first(tmp_path, monkeypatch):
    from queen_raft.raft.snapshot_file import encode_snapshot

    dump = tmp_path / "snap"
    dump.write_bytes(encode_snapshot(([{}, b"state"], (b"\x00", 2, 1), (b"\x00", 1, 1), set())))
    synced = []
    monkeypatch.setattr("queen_raft.raft.journal.fsync_path", synced.append)
    journal = GroupCommitJournal(str(tmp_path / "j"), str(dump))
    journal.clear()  # as when a snapshot from the leader is loaded
    assert str(dump) in synced
    for idx in (1, 2, 3):
        journal.add(b"\x00", idx, 1)
    synced.clear()
    journal.deleteEntriesTo(2)
    assert str(dump) in synced and str(tmp_path) in synced  # the file and its directory
    assert [e[1] for e in journal] == [3]


def test_journal_factory_picks_the_registered_kind(tmp_path):
    group_path, off_path = str(tmp_path / "g"), str(tmp_path / "o")
    register_journal(group_path, "group", None)
    register_journal(off_path, "off", None)
    try:
        assert type(create_journal(group_path)) is GroupCommitJournal
        assert type(create_journal(off_path)) is CompactionGuardedJournal
    finally:
        unregister_journal(group_path)
        unregister_journal(off_path)


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


# -- apply and snapshots ---------------------------------------------------------------------------------


class ListState:
    def __init__(self, items=None):
        self.items = list(items or [])
        self.clock = 0

    def apply(self, command):
        if command["op"] == "raise":
            raise ValueError("bad")
        self.items.append(command["payload"])
        return {"n": len(self.items)}

    def next_due_at(self):
        return 42

    def snapshot(self):
        return msgpack.packb(self.items, use_bin_type=True)

    @classmethod
    def restore(cls, data):
        return cls(msgpack.unpackb(data, raw=False))


def test_commands_keep_bytes_as_bytes():
    command = {"op": "x", "now": 1, "payload": b"\x00\xff", "name": "s"}
    assert decode_command(encode_command(command)) == command


def test_apply_answers_internal_error_instead_of_raising_and_reports_due():
    dues = []
    consumer = ReplicatedTenantState(ListState, ListState.restore, dues.append)

    def apply(consumer, entry):  # how pysyncobj runs the body on every replica
        return consumer.apply(entry, _doApply=True)

    assert apply(consumer, encode_command({"op": "add", "payload": b"a"})) == {"n": 1}
    result = apply(consumer, encode_command({"op": "raise"}))
    assert result["error"] == "internal" and "ValueError" in result["message"]
    assert apply(consumer, b"\xc1not msgpack")["error"] == "internal"
    assert consumer.internal_errors == 2
    assert dues == [42]


def test_snapshot_blob_pickles_as_the_state_snapshot_and_restores():
    consumer = ReplicatedTenantState(ListState, ListState.restore, lambda due: None)
    consumer.state.items = [b"a", b"b"]
    blob = consumer._serialize()
    assert isinstance(blob, SnapshotBlob)
    data = pickle.loads(pickle.dumps(blob, protocol=4))
    assert data == consumer.state.snapshot()
    other = ReplicatedTenantState(ListState, ListState.restore, lambda due: None)
    other._deserialize(data)
    assert other.state.items == [b"a", b"b"]



def test_journal_counts_its_bytes_through_every_change(tmp_path):
    journal = CompactionGuardedJournal(str(tmp_path / "j"))
    for idx, size in ((1, 10), (2, 20), (3, 30)):
        journal.add(b"\x00" * size, idx, 1)
    assert journal.size_bytes == 60
    journal.deleteEntriesFrom(2)
    assert journal.size_bytes == 30
    journal.deleteEntriesTo(1)
    assert journal.size_bytes == 20
    journal._destroy()
    assert CompactionGuardedJournal(str(tmp_path / "j")).size_bytes == 20  # recounted on reopen


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


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_compaction_rewrites_the_journal_atomically_in_the_journal_format(tmp_path, kind):
    path = str(tmp_path / "j")
    journal = kind(path, None)
    entries = [(b"\x00" + bytes([i]) * (i * 100), i, 1 + i // 4) for i in range(1, 11)]
    for entry in entries:
        journal.add(*entry)
    with open(path + ".compacting", "wb") as stale:
        stale.write(b"left by a crash")
    journal.deleteEntriesTo(6)
    assert [tuple(e) for e in journal] == entries[6:]
    journal.add(b"\x00new", 11, 4)  # appends continue after the rewritten records
    journal._destroy()
    assert not os.path.exists(path + ".compacting")
    reopened = CompactionGuardedJournal(path)  # a fresh load agrees
    assert [tuple(e) for e in reopened] == entries[6:] + [(b"\x00new", 11, 4)]


def test_a_crash_during_compaction_leaves_the_old_journal_whole(tmp_path, monkeypatch):
    path = str(tmp_path / "j")
    journal = CompactionGuardedJournal(path)
    entries = [(b"\x00" + bytes([i]) * 50, i, 1) for i in range(1, 8)]
    for entry in entries:
        journal.add(*entry)

    def crash(*args):
        raise KeyboardInterrupt("killed between writing the new journal and renaming it")

    monkeypatch.setattr("queen_raft.raft.journal.os.replace", crash)
    with pytest.raises(KeyboardInterrupt):
        journal.deleteEntriesTo(4)
    assert [tuple(e) for e in CompactionGuardedJournal(path)] == entries  # the journal on disk is untouched


def write_pysyncobj_dump(path: str, last: tuple, prev: tuple) -> None:
    """A snapshot file as pysyncobj's forked serializer writes it: gzip(pickle((data, last, prev, cluster)))."""
    import gzip

    import pysyncobj.pickle

    with gzip.open(path, "wb") as dump:
        pysyncobj.pickle.dump(([{}, b"state"], last, prev, set()), dump)


@pytest.mark.parametrize("kind", [CompactionGuardedJournal, GroupCommitJournal])
def test_a_journal_behind_its_snapshot_keeps_the_tail_after_the_snapshot(tmp_path, kind):
    """Killed between the snapshot's rename and the journal's compaction: stock pysyncobj would
    clear the journal down to the snapshot's two entries and lose entries 7..10 on this node."""
    path, dump = str(tmp_path / "j"), str(tmp_path / "snap")
    entries = [(b"\x00" + bytes([i]), i, 1) for i in range(1, 11)]
    journal = kind(path, None)
    for entry in entries:
        journal.add(*entry)
    journal._destroy()
    write_pysyncobj_dump(dump, last=entries[5], prev=entries[4])

    reopened = kind(path, dump)
    assert reopened.reconciled_with_snapshot
    assert [tuple(e) for e in reopened] == entries[4:]  # [prev, last, 7, 8, 9, 10]: what pysyncobj accepts
    reopened._destroy()
    assert [tuple(e) for e in CompactionGuardedJournal(path)] == entries[4:]


def test_a_journal_whose_committed_entry_conflicts_with_its_snapshot_refuses_to_open(tmp_path):
    """Stock pysyncobj would clear the journal down to the snapshot's entries (losing committed 5);
    the node refuses to start instead (snapshot_reconcile.py), and the journal is left untouched."""
    from queen_raft.raft.snapshot_file import DataDirRefused

    path, dump = str(tmp_path / "j"), str(tmp_path / "snap")
    journal = CompactionGuardedJournal(path)
    for i in range(1, 6):
        journal.add(b"\x00", i, 1)
    journal.setRaftCommitIndex(5)
    journal.onOneSecondTimer()  # stores the meta
    journal._destroy()
    write_pysyncobj_dump(dump, last=(b"\x00", 4, 2), prev=(b"\x00", 3, 2))  # same index, other term
    with pytest.raises(DataDirRefused, match="conflicts with the committed entry at that index"):
        CompactionGuardedJournal(path, dump)
    assert len(CompactionGuardedJournal(path)) == 5


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
