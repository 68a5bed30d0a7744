"""The streamed snapshot (format 4): it restores to the same state, two replicas holding the same
timers write the same bytes however their indexes grew, a format-3 snapshot of an earlier version
still restores, and writing one holds no copy of the encoded state."""

from __future__ import annotations

import hashlib
import io
import tracemalloc
from pathlib import Path

import msgpack
import zstandard

from queen_raft.raft.replicated_state import SnapshotBlob
from queen_raft.raft.snapshot_file import encode_snapshot, read_snapshot, write_snapshot
from queen_raft.state import TenantState
from queen_raft.state.limits import SNAPSHOT_FORMAT_VERSION
from queen_raft.state.snapshot_codec import SNAPSHOT_CHUNK_BYTES
from queen_raft.state import timer_wire
from queen_raft.state.timer_wire import PIECE_ITEMS
from snapshot_history import history

FORMAT3_FIXTURE = Path(__file__).parent / "fixtures" / "tenant_snapshot_format3.zst"
T0 = 1_700_000_000_000


def schedule_rows(state: TenantState, rows: list[list], now: int = T0) -> None:
    answer = state.apply({"op": "timers", "now": now, "producerSub": "s", "maxPending": None,
                          "ops": [{"op": "schedule_rows", "rows": rows}]})
    assert "results" in answer, answer


def row(queue: str, i: int) -> list:
    # Key order and due order unrelated (a multiplicative spread), a few keys in order at one due.
    delay = 60_000 + (i * 7919) % 500_000 if i % 5 else 90_000
    payload = hashlib.sha256(b"%d" % i).digest()  # does not compress: the snapshot spans chunks
    return [queue, f"key-{i:07d}", "Default", delay, f"txn-{i}", f"m-{i}", payload, False, False]


def replicas(count: int) -> tuple[TenantState, TenantState]:
    """Two states holding the same timers, built in different orders and batch sizes (so their
    sorted indexes are split into different sublists)."""
    rows = [row(("a", "b", "c")[i % 3], i) for i in range(count)]
    one, two = TenantState(), TenantState()
    for start in range(0, count, 256):
        schedule_rows(one, rows[start:start + 256])
    backwards = rows[::-1]
    for start in range(0, count, 1000):
        schedule_rows(two, backwards[start:start + 1000])
    return one, two


def test_two_replicas_write_identical_bytes_and_a_restore_reads_back_the_same_state():
    one, two = replicas(12 * PIECE_ITEMS + 123)
    assert list(map(len, one.timers.due._lists)) != list(map(len, two.timers.due._lists))
    snapshot = one.snapshot()
    assert snapshot == two.snapshot()
    assert len(snapshot) > SNAPSHOT_CHUNK_BYTES  # more than one chunk, so their cut is covered
    restored = TenantState.restore(snapshot)
    restored.check_invariants()
    assert restored.snapshot() == snapshot
    assert restored.counters() == one.counters()
    for queue in ("a", "b", "c"):
        assert list(restored.timers.keys[queue]) == list(one.timers.keys[queue])
        assert restored.timers.by_queue[queue] == one.timers.by_queue[queue]
    assert list(restored.timers.due) == list(one.timers.due)
    version = msgpack.Unpacker(zstandard.ZstdDecompressor().stream_reader(snapshot)).unpack()[0]
    assert version == SNAPSHOT_FORMAT_VERSION == 4


def test_the_chunks_are_the_bytes_and_restore_takes_them_as_a_list():
    one, _ = replicas(10 * PIECE_ITEMS)
    chunks = list(one.snapshot_chunks())
    assert all(len(chunk) == SNAPSHOT_CHUNK_BYTES for chunk in chunks[:-1])
    assert b"".join(chunks) == one.snapshot()
    assert TenantState.restore(chunks).snapshot() == one.snapshot()
    output = io.BytesIO()
    one.write_snapshot(output)
    assert output.getvalue() == one.snapshot()


def state_of_the_history() -> TenantState:
    state = TenantState()
    for command in history():
        answer = state.apply(command)
        assert "error" not in answer, answer
    return state


def test_a_format_3_snapshot_written_by_the_earlier_version_restores():
    """The fixture is the history's snapshot as the format-3 encoder wrote it (a node upgraded in
    place, or a backup taken before, reads it)."""
    old = FORMAT3_FIXTURE.read_bytes()
    wire = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(old), raw=False, strict_map_key=False)
    assert wire[0] == 3 and isinstance(wire[5], bytes)
    restored = TenantState.restore(old)
    restored.check_invariants()
    expected = state_of_the_history()
    assert restored.snapshot() == expected.snapshot()
    assert restored.counters() == expected.counters()
    assert restored.peek_timer("nul", "a\x00b") == expected.peek_timer("nul", "a\x00b")


def dump_of(data) -> tuple:
    return [{}, data], (b"\x00", 9, 1), (b"\x00", 8, 1), set()


def test_the_raft_file_holds_the_chunks_and_loads_old_files_holding_bytes(tmp_path):
    one, _ = replicas(10 * PIECE_ITEMS)
    new_file, old_file = tmp_path / "new.snapshot", tmp_path / "old.snapshot"
    write_snapshot(str(new_file), dump_of(SnapshotBlob(one)))
    assert new_file.read_bytes() == encode_snapshot(dump_of(SnapshotBlob(one)))
    data = read_snapshot(str(new_file))[0][1]
    assert isinstance(data, list) and b"".join(data) == one.snapshot()
    assert TenantState.restore(data).snapshot() == one.snapshot()
    # A file written before (the state's bytes pickled whole), or by `cluster restore`.
    write_snapshot(str(old_file), dump_of(FORMAT3_FIXTURE.read_bytes()))
    data = read_snapshot(str(old_file))[0][1]
    assert isinstance(data, bytes)
    assert TenantState.restore(data).snapshot() == state_of_the_history().snapshot()


def test_writing_the_raft_file_holds_no_copy_of_the_encoded_state(tmp_path):
    """tracemalloc's peak while the raft file's pickle is written, against the encoded size: the
    writer may hold a piece and a chunk, never the state's msgpack or its zstd output whole."""
    count = 200_000
    state = TenantState()
    rows = [row("q", i)[:6] + [bytes(64), False, False] for i in range(count)]
    for start in range(0, count, 4096):
        schedule_rows(state, rows[start:start + 4096])
    packed_bytes = len(zstandard.ZstdDecompressor().decompressobj().decompress(state.snapshot()))
    path = tmp_path / "raft.snapshot"
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        write_snapshot(str(path), dump_of(SnapshotBlob(state)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    written = path.stat().st_size
    assert written > 1 << 20
    assert peak - baseline < packed_bytes / 8, (peak - baseline, packed_bytes, written)


def test_key_maps_restore_across_fetch_chunks_and_for_a_queue_of_one_timer(monkeypatch):
    monkeypatch.setattr(timer_wire, "KEY_MAP_CHUNK", 4)
    state = TenantState()
    schedule_rows(state, [row("nine", i) for i in range(9)] + [row("solo", 99)])
    restored = TenantState.restore(state.snapshot())
    restored.check_invariants()
    assert restored.timers.by_queue == state.timers.by_queue
    assert list(restored.timers.by_queue["nine"]) == list(state.timers.keys["nine"])
