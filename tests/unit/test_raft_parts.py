"""The Raft layer's parts alone: clock, settings, the replicated apply wrapper and the snapshot blob.
Journal durability is in test_raft_parts_journal.py; group-commit holding and the coalesced sends in
test_raft_parts_transport.py."""

from __future__ import annotations

import pickle

import msgpack
import pytest

from queen_raft import clock
from queen_raft.raft import RaftSettings
from queen_raft.raft.errors import GroupUnavailable
from queen_raft.raft.loopback import is_loopback_host
from queen_raft.raft.replicated_state import ReplicatedTenantState, SnapshotBlob, decode_command, encode_command


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
