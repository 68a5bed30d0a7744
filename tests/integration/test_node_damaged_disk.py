"""A node whose journal or .meta is damaged refuses to start: exit 65, the file, the offset and the
recovery step in its log, instead of serving a value the other replicas never had."""

from __future__ import annotations

import os
import time

import pytest

from cluster_fixture import NodeCluster, token

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
VALUE = "kv-value-that-the-test-damages-on-disk"
EXIT_TIMEOUT_S = 30.0


@pytest.fixture
def stopped_single_node(tmp_path):
    """A one-node cluster that stored VALUE under acme's kv/dmg/k, then stopped cleanly."""
    cluster = NodeCluster(tmp_path, node_count=1).start()
    try:
        status, _, body = cluster.call("n1", "PUT", "/api/v1/kv/dmg/k", RW, {"value": VALUE})
        assert status == 200, body
    finally:
        assert cluster.stop() == {"n1": 0}
    yield cluster
    cluster.stop()


def journal_path(cluster: NodeCluster) -> str:
    return str(cluster.data_dir / "n1" / "acme" / "raft.journal")


def restart_and_wait_for_exit(cluster: NodeCluster) -> tuple[int, str]:
    cluster.start_node("n1")
    process = cluster.processes["n1"]
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if process.poll() is None:
        cluster.stop_node("n1")
        pytest.fail(f"the node started on a damaged disk:\n{cluster.log_tail('n1')}")
    return process.returncode, cluster.log_path("n1").read_text(errors="replace")


def assert_refused_with_65(cluster: NodeCluster, damaged_file: str, offset: int | None = None) -> None:
    code, log = restart_and_wait_for_exit(cluster)
    assert code == 65, log[-3000:]
    refusal = next(line for line in log.splitlines() if "refuses to start" in line)
    assert damaged_file in refusal and "wipe this node's data dir" in refusal, refusal
    if offset is not None:
        assert f"offset {offset}" in refusal, refusal
    assert "Traceback" not in log.split("refuses to start")[-1]


def test_a_flipped_byte_in_a_stored_value_stops_the_node_with_65(stopped_single_node):
    path = journal_path(stopped_single_node)
    with open(path, "r+b") as f:
        data = f.read()
        at = data.index(VALUE.encode())
        f.seek(at + 5)
        f.write(bytes([data[at + 5] ^ 0x20]))  # 'v' -> 'V': still a valid msgpack string, another value
    assert_refused_with_65(stopped_single_node, path)


def test_a_truncated_journal_stops_the_node_with_65(stopped_single_node):
    path = journal_path(stopped_single_node)
    with open(path, "rb") as f:
        at = f.read().index(VALUE.encode())
    os.truncate(path, at)
    assert_refused_with_65(stopped_single_node, path, offset=36)


@pytest.mark.parametrize("content", [b"", b"\x80\x04garbage"])
def test_an_empty_or_garbage_meta_stops_the_node_with_65(stopped_single_node, content):
    path = journal_path(stopped_single_node) + ".meta"
    with open(path, "wb") as f:
        f.write(content)
    assert_refused_with_65(stopped_single_node, path, offset=0)


def test_a_leader_that_reads_back_a_damaged_entry_stops_with_65_and_sends_nothing_of_it(tmp_path):
    """The byte flips on the leader's disk after the write committed; a follower that was down
    needs the entry, the leader reads it back to send it, finds the damage and stops. The group
    goes on with the other two nodes and the original value."""
    cluster = NodeCluster(tmp_path).start()
    try:
        leader = cluster.role_of("acme", "leader")
        lagging, other = [n for n in cluster.node_ids if n != leader]
        assert cluster.stop_node(lagging) == 0
        status, _, body = cluster.call(leader, "PUT", "/api/v1/kv/dmg/k", RW, {"value": VALUE})
        assert status == 200, body
        path = str(cluster.data_dir / leader / "acme" / "raft.journal")
        with open(path, "r+b") as f:
            data = f.read()
            at = data.index(VALUE.encode())
            f.seek(at + 5)
            f.write(bytes([data[at + 5] ^ 0x20]))
        cluster.start_node(lagging)
        process = cluster.processes[leader]
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() == 65, cluster.log_tail(leader)
        log = cluster.log_path(leader).read_text(errors="replace")
        assert f"damaged data in {path}" in log and "wipe this node's data dir" in log
        cluster.wait_ready([lagging, other])
        for node in (lagging, other):
            status, _, body = cluster.call(node, "GET", "/api/v1/kv/dmg/k", token("acme", "read-only"))
            assert status == 200 and body["value"] == VALUE, (node, body)
    finally:
        cluster.stop()
