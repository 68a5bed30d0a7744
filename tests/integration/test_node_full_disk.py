"""One node's data dir on a small tmpfs that fills up: the node logs it, refuses writes with 503
`disk_full`, keeps serving reads, never dies (it died of SIGBUS), and takes writes again once space
returns. Needs root (mount -t tmpfs); without it the test is skipped, saying so."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from cluster_fixture import NodeCluster, token

pytestmark = pytest.mark.integration

FULL_NODE = "n3"
TMPFS_SIZE = "24m"
RW = token("acme", "read-write")
RO = token("acme", "read-only")
VALUE_BYTES = 48 * 1024
FILL_TIMEOUT_S = 60.0
RECOVER_TIMEOUT_S = 30.0


class TmpfsNodeCluster(NodeCluster):
    """A NodeCluster whose FULL_NODE keeps its data dir on a tmpfs of its own."""

    mounts: list[Path]

    def start_node(self, node_id: str, without_env: tuple[str, ...] = ()) -> None:
        if node_id == FULL_NODE:
            mount_point = self.data_dir / node_id
            if mount_point not in self.mounts:
                mount_point.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
                               check=True, capture_output=True)
                self.mounts.append(mount_point)
        super().start_node(node_id, without_env)


@pytest.fixture
def cluster_with_a_tmpfs_node(tmp_path):
    if os.geteuid() != 0:
        # CI runs as root, so there the test always runs: a CI that could not would fail here, not
        # pass by skipping. A developer's `make test` without root still runs everything else.
        if os.environ.get("CI"):
            pytest.fail("mounting a tmpfs needs root, and CI must run this test")
        pytest.skip("mounting a tmpfs needs root")
    cluster = TmpfsNodeCluster(tmp_path)
    cluster.mounts = []
    try:
        cluster.start()
        yield cluster
    finally:
        codes = cluster.stop()
        for mount_point in cluster.mounts:
            subprocess.run(["umount", str(mount_point)], check=False, capture_output=True)
    assert codes.get(FULL_NODE) == 0, cluster.log_tail(FULL_NODE)


def fill(directory: Path) -> Path:
    """A file that takes every free byte of the filesystem."""
    filler = directory / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        for size in (1 << 16, 1 << 12, 1 << 9):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
    return filler


def put(cluster: NodeCluster, node: str, key: str, value: str):
    return cluster.call(node, "PUT", f"/api/v1/kv/full/{key}", RW, {"value": value})


def acme_health(cluster: NodeCluster, node: str) -> tuple[int, object, str | None]:
    """(status, body, the acme group's problem) of one /health answer."""
    status, body = cluster.health(node)
    return status, body, body["groups"]["acme"].get("problem") if isinstance(body, dict) else None


def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(cluster_with_a_tmpfs_node):
    cluster = cluster_with_a_tmpfs_node
    writer = next(n for n in cluster.node_ids if n != FULL_NODE)
    filler = fill(cluster.data_dir / FULL_NODE)

    deadline = time.monotonic() + FILL_TIMEOUT_S
    written = 0
    while (health := acme_health(cluster, FULL_NODE))[2] != "disk_full":
        assert time.monotonic() < deadline, f"{FULL_NODE} never reported disk_full\n{cluster.log_tail(FULL_NODE)}"
        assert cluster.running(FULL_NODE), f"{FULL_NODE} died:\n{cluster.log_tail(FULL_NODE)}"
        status, _, body = put(cluster, writer, f"fill-{written}", "x" * VALUE_BYTES)
        assert status == 200, body
        written += 1
    # The answer that names the problem is the unhealthy one. (Not asked again later: the journal
    # retries its writes every tick, and any space that comes back ends the episode.)
    health_status, body, _ = health
    assert health_status == 503 and body["status"] == "unhealthy", body

    status, headers, body = put(cluster, FULL_NODE, "refused", "y")
    assert status == 503 and body["reason"] == "disk_full" and int(headers["Retry-After"]) >= 1, body
    status, _, body = put(cluster, writer, "after-full", "written while n3's disk was full")
    assert status == 200, body
    status, _, body = cluster.call(FULL_NODE, "GET", "/api/v1/kv/full/after-full", RO)
    assert status == 200 and body["value"] == "written while n3's disk was full", body
    # Logged when a write first fails, not on every append or retry; only a write that fits again
    # (the meta reserve's space freed, say) ends the episode, and the next failure is logged anew.
    log = cluster.log_path(FULL_NODE).read_text(errors="replace")
    failures, recoveries = log.count("acme/raft.journal: cannot write"), log.count("acme/raft.journal: writable again")
    assert 1 <= failures <= recoveries + 1, log[-4000:]

    filler.unlink()
    deadline = time.monotonic() + RECOVER_TIMEOUT_S
    while True:
        status, _, body = put(cluster, FULL_NODE, "after-space", "z")
        if status == 200:
            break
        assert body.get("reason") == "disk_full" and time.monotonic() < deadline, body
        time.sleep(0.2)
    assert "acme/raft.journal: writable again" in cluster.log_path(FULL_NODE).read_text(errors="replace")
    status, _, body = cluster.call(writer, "GET", "/api/v1/kv/full/after-space", RO)
    assert status == 200 and body["value"] == "z"
    assert cluster.running(FULL_NODE)
