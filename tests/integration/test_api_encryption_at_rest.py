"""Encryption at rest on three real nodes: no node's data files (journal and snapshot,
the snapshot's zstd frames decompressed) hold the plaintext of a push or a timer for an encrypting
queue, while the same files do hold a marker sent to a plain queue (so the search can see); and a
node restarted without QUEEN_ENCRYPTION_KEY refuses to run."""

from __future__ import annotations

import base64
import gzip
import time
import uuid
from pathlib import Path

import pytest
import zstandard

from cluster_fixture import NodeCluster, token
from queen_raft.node import EXIT_MISSING_ENCRYPTION_KEY

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
KEY = "5a" * 32
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
# Entries past which pysyncobj compacts (writes a snapshot): small, so a few calls make one.
COMPACTION_ENTRIES = 20
SNAPSHOT_WAIT_S = 30.0
EXIT_WAIT_S = 90.0  # the node reads its groups after the barrier, then stops cleanly


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = NodeCluster(tmp_path_factory.mktemp("encrypted"), env={"QUEEN_ENCRYPTION_KEY": KEY},
                          settings={"log_compaction_min_entries": COMPACTION_ENTRIES}).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def readable_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when gzip (pysyncobj writes its snapshot file so), and every zstd
    frame in them decompressed (our snapshot inside is msgpack + zstd): a plaintext inside would
    not show in the raw bytes."""
    raw = path.read_bytes()
    if raw.startswith(GZIP_MAGIC):
        raw = raw + gzip.decompress(raw)
    parts = [raw]
    start = raw.find(ZSTD_MAGIC)
    while start != -1:
        try:  # a decompressobj stops at the end of its frame; what follows in the file is not zstd
            parts.append(zstandard.ZstdDecompressor().decompressobj().decompress(raw[start:]))
        except zstandard.ZstdError:
            pass
        start = raw.find(ZSTD_MAGIC, start + 1)
    return b"".join(parts)


def data_files(cluster: NodeCluster) -> list[Path]:
    return [p for p in cluster.data_dir.rglob("*") if p.is_file()]


def every_data_file_read(cluster: NodeCluster, attempts: int = 20) -> dict[Path, bytes]:
    """Each data file's readable bytes, from one pass in which none vanished. A compaction that
    runs meanwhile renames its transient files (`raft.journal.compacting`) into place; a pass that
    meets one gone is made again, so what it held is read where it went."""
    for _ in range(attempts):
        try:
            return {path: readable_bytes(path) for path in data_files(cluster)}
        except FileNotFoundError:
            continue
    raise AssertionError(f"every pass over the data files met a file that vanished ({attempts} passes)")


def snapshots(cluster: NodeCluster) -> list[Path]:
    return [p for p in data_files(cluster) if p.name == "raft.snapshot" and p.parent.name == "acme"]


def test_no_plaintext_in_any_data_file_and_a_keyless_node_refuses_to_start(cluster):
    secret = f"SECRET-{uuid.uuid4().hex}".encode()
    plain = f"PLAIN-{uuid.uuid4().hex}".encode()
    node = cluster.node_ids[0]
    status, _, _ = cluster.call(node, "POST", "/api/v1/configure", RW, {"queue": "vault", "options": {"encryptionEnabled": True}})
    assert status == 200
    status, _, _ = cluster.call(node, "POST", "/api/v1/push", RW, {"items": [
        {"queue": "vault", "payloadB64": base64.b64encode(secret + b"-push").decode()},
        {"queue": "open", "payloadB64": base64.b64encode(plain).decode()}]})
    assert status == 201
    status, _, body = cluster.call(node, "POST", "/api/v1/timers", RW, {"operations": [
        {"op": "schedule", "queue": "vault", "timerKey": "t", "delayMs": 3_600_000, "txn": "t",
         "payload": base64.b64encode(secret + b"-timer").decode()}]})
    assert status == 200, body
    status, _, body = cluster.call(node, "POST", "/api/v1/transaction", RW, {"timers": [
        {"op": "schedule", "queue": "vault", "timerKey": "in-txn", "delayMs": 3_600_000, "txn": "x",
         "payload": base64.b64encode(secret + b"-txn").decode()}]})
    assert body["success"] is True
    # Consumers get the plaintext back; peek shows the stored ciphertext.
    _, _, fetched = cluster.call(node, "POST", "/api/v1/fetch", RW, {"entries": [{"queue": "vault"}]})
    assert base64.b64decode(fetched["entries"][0]["records"][0]["payloadB64"]) == secret + b"-push"
    _, _, peek = cluster.call(node, "GET", "/api/v1/timers/vault/t", RW)
    assert peek["encrypted"] is True and secret not in base64.b64decode(peek["payload"])
    # A client-supplied `encrypted` on this queue is a 400.
    status, _, body = cluster.call(node, "POST", "/api/v1/timers", RW, {"operations": [
        {"op": "schedule", "queue": "vault", "timerKey": "u", "delayMs": 1000, "txn": "u", "payload": "AA==",
         "encrypted": True}]})
    assert (status, body["error"]) == (400, "timers_bad_request")

    # Enough entries that every node compacts its log into a snapshot, which then holds it all.
    for i in range(COMPACTION_ENTRIES * 2):
        cluster.call(node, "PUT", f"/api/v1/kv/fill/{i}", RW, {"value": i})
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while len(snapshots(cluster)) < len(cluster.node_ids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(snapshots(cluster)) == len(cluster.node_ids), "not every node wrote a snapshot"
    assert all(plain in readable_bytes(p) for p in snapshots(cluster)), "the search cannot see a plain payload"
    for path, content in every_data_file_read(cluster).items():
        assert secret not in content, f"plaintext of an encrypting queue in {path}"

    # Restarted without the key, a node replays its groups, finds the queue and exits.
    victim = cluster.node_ids[2]
    cluster.stop_node(victim)
    cluster.start_node(victim, without_env=("QUEEN_ENCRYPTION_KEY",))
    try:
        code = cluster.processes[victim].wait(timeout=EXIT_WAIT_S)
    finally:
        if cluster.running(victim):
            cluster.stop_node(victim)
    assert code == EXIT_MISSING_ENCRYPTION_KEY
    log = cluster.log_path(victim).read_text(errors="replace")
    assert "has no QUEEN_ENCRYPTION_KEY but queues encrypt at rest (tenant acme: vault)" in log
