"""deploy/systemd/queen-raft@.service under a real systemd as PID 1 (`make test-systemd`).

A Debian machine booted by systemd-nspawn (nspawn_machine.py) gets the wheel built from this tree in
/opt/queen-raft, the `queen-raft` user, /etc/queen-raft/cluster.toml for three nodes n1..n3 on
127.0.0.1 with a Raft password, and the unit as docs/operations.md installs it. The three instances
are enabled and started by systemd, and the test talks to them from the host. Each test leaves all
three instances active for the next. It takes about a minute (a few more the first time, to build the
root file system), so `make test` does not collect it (pytest's `--ignore=tests/system`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from cluster_fixture import TENANTS, NodeCluster, fetch_records, token  # noqa: E402
from nspawn_machine import NspawnMachine, ensure_rootfs_cache, machine_unavailable_reason  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
UNIT_FILE = REPO / "deploy" / "systemd" / "queen-raft@.service"
NODES = ("n1", "n2", "n3")
RW = token("acme", "read-write")
DATA_DIR = "/var/lib/queen-raft"
EXIT_DAMAGED_DATA = 65
# Enough for a restart after the unit's RestartSec=2 plus a node's start and catch-up on a loaded
# 2-core machine.
NODE_BACK_TIMEOUT_S = 60.0
# A unit that must stay failed is watched this long: several times its RestartSec.
STAYS_FAILED_S = 8.0
# The longest a client retrying across the three nodes may go without an acknowledged write while
# one node restarts: an election after the leader's restart takes about a second.
MAX_WRITE_GAP_S = 5.0
POLL_INTERVAL_S = 0.1
PERMISSION_ERRORS = ("Permission denied", "PermissionError", "Read-only file system", "Operation not permitted",
                     "EACCES", "EPERM", "Failed to set up", "Failed at step")
FIGURES: dict[str, str] = {}

# The first test's setup may debootstrap the root file system (minutes on a slow mirror).
pytestmark = [pytest.mark.skipif(machine_unavailable_reason() is not None, reason=machine_unavailable_reason() or ""),
              pytest.mark.timeout(1800)]


def unit(node_id: str) -> str:
    return f"queen-raft@{node_id}.service"


class SystemdCluster(NodeCluster):
    """The cluster's config and HTTP helpers, with systemd running the nodes instead of the test."""

    def __init__(self, workdir: Path, machine: NspawnMachine):
        super().__init__(workdir, node_count=len(NODES))
        self.machine = machine
        self.data_dir = Path(DATA_DIR)
        self.config_path = machine.path("/etc/queen-raft/cluster.toml")

    def running(self, node_id: str) -> bool:
        return self.machine.unit_properties(unit(node_id), "ActiveState")["ActiveState"] == "active"

    def log_tail(self, node_id: str, lines: int = 30) -> str:
        return f"--- {node_id} ---\n" + "\n".join(self.machine.journal(unit(node_id)).splitlines()[-lines:])

    def leader_of(self, tenant: str = "acme") -> str:
        """The node that leads the tenant's group, told by its Raft address in /health."""
        index = TENANTS.index(tenant)
        for node_id in self.node_ids:
            status, body = self.health(node_id)
            if status == 200 and body["groups"][tenant]["leader"]:
                port = int(body["groups"][tenant]["leader"].rsplit(":", 1)[1])
                return next(n for n in self.node_ids if self.raft_ports[n] + index == port)
        raise LookupError(f"no node names a leader for {tenant}")


def install(machine: NspawnMachine, cluster: SystemdCluster) -> None:
    """The wheel of this tree and its dependencies (downloaded on the host: the machine may have no
    route to an index), the user, the config and the unit, as docs/operations.md does it."""
    wheels = machine.path("/var/tmp/queen-raft-wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=900)
    machine.run("python3", "-m", "venv", "/opt/queen-raft")
    machine.run("/opt/queen-raft/bin/pip", "install", "--quiet", "--no-index", "--find-links",
                "/var/tmp/queen-raft-wheels", "queen-raft", timeout=600)
    machine.run("useradd", "--system", "--home-dir", DATA_DIR, "--shell", "/usr/sbin/nologin", "queen-raft")
    machine.run("install", "-d", "-m", "0750", "-g", "queen-raft", "/etc/queen-raft")
    cluster.write_config()
    machine.run("chgrp", "queen-raft", "/etc/queen-raft/cluster.toml")
    machine.run("chmod", "0640", "/etc/queen-raft/cluster.toml")
    machine.path("/etc/systemd/system/queen-raft@.service").write_bytes(UNIT_FILE.read_bytes())
    machine.run("systemctl", "daemon-reload")


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("systemd")
    started = time.monotonic()
    cache = ensure_rootfs_cache()
    FIGURES["root file system ready (built or cached)"] = f"{time.monotonic() - started:.1f} s"
    booted = NspawnMachine(workdir / "rootfs", workdir / "nspawn.log")
    booted.copy_from(cache)
    try:
        FIGURES["boot until is-system-running answers"] = f"{booted.boot():.1f} s ({booted.boot_state})"
        yield booted
    finally:
        if booted.systemd_pid is not None and booted.nspawn is not None and booted.nspawn.poll() is None:
            (workdir / "journal.txt").write_text(booted.journal())  # kept for a failed run; the root is not
        booted.poweroff()
        shutil.rmtree(booted.root, ignore_errors=True)  # about 300 MB a run
        for name, figure in FIGURES.items():
            print(f"systemd figures: {name}: {figure}")


@pytest.fixture(scope="module")
def cluster(machine, tmp_path_factory):
    nodes = SystemdCluster(tmp_path_factory.mktemp("cluster"), machine)
    started = time.monotonic()
    install(machine, nodes)
    FIGURES["install (wheels, venv, user, config, unit)"] = f"{time.monotonic() - started:.1f} s"
    started = time.monotonic()
    machine.run("systemctl", "enable", "--now", *(unit(n) for n in NODES))
    nodes.wait_ready(list(NODES), timeout_s=NODE_BACK_TIMEOUT_S)
    FIGURES["`enable --now` to three healthy nodes with leaders"] = f"{time.monotonic() - started:.1f} s"
    return nodes


def put_kv(cluster: SystemdCluster, node_id: str, key: str, value: str) -> bool:
    status, _, _ = cluster.call(node_id, "PUT", f"/api/v1/kv/systemd/{key}", RW, {"value": value})
    return status == 200


def assert_every_value_on_every_node(cluster: SystemdCluster, written: dict[str, str]) -> None:
    for node_id in NODES:
        for key, value in written.items():
            status, _, body = cluster.call(node_id, "GET", f"/api/v1/kv/systemd/{key}", RW)
            assert status == 200 and body["found"] and body["value"] == value, (node_id, key, status, body)


def schedule(cluster: SystemdCluster, node_id: str, queue: str, delay_ms: int, txn: str) -> None:
    op = {"op": "schedule", "queue": queue, "timerKey": txn, "delayMs": delay_ms, "txn": txn, "payload": "e30="}
    status, _, body = cluster.call(node_id, "POST", "/api/v1/timers", RW, {"operations": [op]})
    assert status == 200 and body["results"][0]["ok"], body


def pop_until(cluster: SystemdCluster, node_id: str, queue: str, expected: set[str], timeout_s: float) -> list[str]:
    """The transaction ids of the fired messages popped from `queue` until `expected` are all seen."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while not expected <= set(seen) and time.monotonic() < deadline:
        status, _, body = cluster.call(node_id, "GET", f"/api/v1/pop/queue/{queue}?wait=true&timeout=1000&batch=100", RW)
        if status == 200:
            seen += [message["transactionId"] for message in body["messages"]]
    return seen


def fired_records(cluster: SystemdCluster, node_id: str, queue: str, count: int, timeout_s: float) -> list[str]:
    """The transaction ids of the queue's records, read (not consumed) once `count` are there."""
    deadline = time.monotonic() + timeout_s
    while True:
        txns = [record["transactionId"] for record in fetch_records(cluster, node_id, queue)]
        if len(txns) >= count or time.monotonic() > deadline:
            return txns
        time.sleep(POLL_INTERVAL_S)


def wait_unit(machine: NspawnMachine, node_id: str, done, timeout_s: float = NODE_BACK_TIMEOUT_S) -> dict[str, str]:
    """The unit's properties once `done(properties)` holds; fails with its journal after the deadline."""
    names = ("ActiveState", "SubState", "Result", "MainPID", "NRestarts", "ExecMainStatus", "ExecMainCode")
    deadline = time.monotonic() + timeout_s
    while True:
        properties = machine.unit_properties(unit(node_id), *names)
        if done(properties):
            return properties
        if time.monotonic() > deadline:
            pytest.fail(f"{unit(node_id)}: {properties}\n{machine.journal(unit(node_id))[-3000:]}")
        time.sleep(POLL_INTERVAL_S)


def test_systemd_starts_three_nodes_that_serve_and_fire_a_timer_from_the_host(cluster, machine):
    for node_id in NODES:
        properties = wait_unit(machine, node_id, lambda p: p["ActiveState"] == "active", timeout_s=1.0)
        assert properties["SubState"] == "running"
        status, body = cluster.health(node_id)
        assert status == 200 and body["node"] == node_id and all(g["leader"] for g in body["groups"].values()), body
    queue, txn = f"q-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    scheduled_at = time.monotonic()
    schedule(cluster, "n2", queue, 500, txn)
    assert pop_until(cluster, "n3", queue, {txn}, timeout_s=20.0) == [txn]
    FIGURES["a 500 ms timer scheduled through n2, popped on n3 after"] = f"{time.monotonic() - scheduled_at:.2f} s"


def test_the_nodes_write_their_data_dir_and_nothing_was_refused_at_start(cluster, machine):
    for node_id in NODES:
        listing = machine.run("stat", "-c", "%U %a %n", f"{DATA_DIR}/{node_id}/acme/raft.journal").stdout.split()
        assert listing[0] == "queen-raft", listing
    mode = machine.run("stat", "-c", "%U %a", DATA_DIR).stdout.split()
    assert mode == ["queen-raft", "700"], mode
    for node_id in NODES:
        pid = machine.unit_properties(unit(node_id), "MainPID")["MainPID"]
        limits = machine.run("cat", f"/proc/{pid}/limits").stdout
        assert "Max open files            8192                 8192" in limits, limits
    journal = machine.journal(*(unit(n) for n in NODES))
    assert "does not fit the open-file limit" not in journal
    refused = [line for line in journal.splitlines() if any(word in line for word in PERMISSION_ERRORS)]
    assert not refused, "\n".join(refused)
    assert "Traceback" not in journal, journal[-3000:]
    # systemd names the unit file and line of a key it ignores or cannot apply.
    complaints = [line for line in machine.journal().splitlines() if "queen-raft@.service:" in line]
    assert not complaints, "\n".join(complaints)


def test_a_leader_killed_with_sigkill_is_restarted_by_systemd_and_loses_nothing(cluster, machine):
    leader = cluster.leader_of("acme")
    written = {f"kill-{i}": f"v{i}" for i in range(20)}
    for i, (key, value) in enumerate(written.items()):
        assert put_kv(cluster, NODES[i % 3], key, value)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    timers = {f"t-{i}" for i in range(10)}
    for txn in timers:
        schedule(cluster, leader, queue, 4000, txn)
    before = wait_unit(machine, leader, lambda p: p["ActiveState"] == "active", timeout_s=1.0)
    killed_at = time.monotonic()
    machine.run("systemctl", "kill", "-s", "KILL", unit(leader))
    wait_unit(machine, leader, lambda p: p["NRestarts"] != before["NRestarts"] and p["ActiveState"] == "active"
              and p["MainPID"] not in ("0", before["MainPID"]))
    FIGURES["SIGKILL to the leader until systemd runs it again"] = f"{time.monotonic() - killed_at:.1f} s"
    cluster.wait_ready(list(NODES), timeout_s=NODE_BACK_TIMEOUT_S)
    FIGURES["SIGKILL to the leader until all three serve again"] = f"{time.monotonic() - killed_at:.1f} s"
    assert put_kv(cluster, leader, "kill-after", "after")
    assert_every_value_on_every_node(cluster, {**written, "kill-after": "after"})
    for node_id in NODES:
        fired = fired_records(cluster, node_id, queue, len(timers), timeout_s=30.0)
        assert sorted(fired) == sorted(timers), (node_id, fired)  # each fired once, none lost
    assert "status=9/KILL" in machine.journal(unit(leader))


class SteadyWriter(threading.Thread):
    """PUTs one key after another, each through the next node that answers; records every
    acknowledged write and the longest time between two acknowledgements."""

    def __init__(self, cluster: SystemdCluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acknowledged: dict[str, str] = {}
        self.longest_gap_s = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        last_ack, attempt = time.monotonic(), 0
        while not self.stopping.is_set():
            key = f"roll-{len(self.acknowledged)}"
            node_id = NODES[attempt % len(NODES)]
            attempt += 1
            if put_kv(self.cluster, node_id, key, key.upper()):
                now = time.monotonic()
                self.longest_gap_s = max(self.longest_gap_s, now - last_ack)
                last_ack = now
                self.acknowledged[key] = key.upper()


def test_a_rolling_restart_with_systemctl_keeps_serving_and_loses_nothing(cluster, machine):
    leader = cluster.leader_of("acme")
    order = [n for n in NODES if n != leader] + [leader]  # followers first, as docs/operations.md says
    writer = SteadyWriter(cluster)
    writer.start()
    try:
        for node_id in order:
            started = time.monotonic()
            machine.run("systemctl", "restart", unit(node_id))
            cluster.wait_ready(list(NODES), timeout_s=NODE_BACK_TIMEOUT_S)
            FIGURES[f"rolling restart: `systemctl restart` of {node_id} to all healthy"] = (
                f"{time.monotonic() - started:.1f} s")
    finally:
        writer.stopping.set()
        writer.join(timeout=30.0)
    FIGURES["rolling restart: acknowledged writes, longest gap between two"] = (
        f"{len(writer.acknowledged)}, {writer.longest_gap_s:.2f} s")
    assert len(writer.acknowledged) > 10
    assert writer.longest_gap_s < MAX_WRITE_GAP_S
    assert_every_value_on_every_node(cluster, writer.acknowledged)
    for node_id in NODES:
        journal = machine.journal(unit(node_id))
        assert "Deactivated successfully" in journal and "timed out" not in journal, journal[-2000:]


def test_a_node_on_damaged_data_exits_65_and_systemd_does_not_restart_it(cluster, machine):
    victim = next(n for n in NODES if n != cluster.leader_of("acme"))
    machine.run("systemctl", "stop", unit(victim))
    meta = machine.path(f"{DATA_DIR}/{victim}/acme/raft.journal.meta")
    assert meta.exists()
    meta.write_bytes(b"\x80\x04garbage")
    restarts_before = machine.journal(unit(victim)).count("Scheduled restart job")
    machine.run("systemctl", "start", unit(victim))
    failed = wait_unit(machine, victim, lambda p: p["ActiveState"] == "failed")
    assert (failed["Result"], failed["ExecMainCode"], failed["ExecMainStatus"]) == ("exit-code", "1", str(EXIT_DAMAGED_DATA)), failed
    # Left failed at once, not after a restart loop that the unit's start limit ends.
    watch_until = time.monotonic() + STAYS_FAILED_S
    while time.monotonic() < watch_until:
        now = machine.unit_properties(unit(victim), "ActiveState", "NRestarts")
        assert now == {"ActiveState": "failed", "NRestarts": failed["NRestarts"]}, now
        time.sleep(POLL_INTERVAL_S)
    journal = machine.journal(unit(victim))
    assert journal.count("Scheduled restart job") == restarts_before, journal[-3000:]
    assert journal.count("refuses to start") == 1 and "status=65/DATAERR" in journal, journal[-3000:]
    # The recovery docs/operations.md gives: wipe the node's data dir and start it; it catches up.
    machine.run("rm", "-rf", f"{DATA_DIR}/{victim}")
    machine.run("systemctl", "reset-failed", unit(victim))
    machine.run("systemctl", "start", unit(victim))
    cluster.wait_ready(list(NODES), timeout_s=NODE_BACK_TIMEOUT_S)


def test_after_a_reboot_systemd_starts_the_enabled_nodes_and_they_keep_their_data(cluster, machine):
    written = {f"reboot-{i}": f"r{i}" for i in range(10)}
    for i, (key, value) in enumerate(written.items()):
        assert put_kv(cluster, NODES[i % 3], key, value)
    started = time.monotonic()
    machine.poweroff()
    FIGURES["reboot: poweroff (three nodes stopped by systemd)"] = f"{time.monotonic() - started:.1f} s"
    started = time.monotonic()
    machine.boot()
    cluster.wait_ready(list(NODES), timeout_s=NODE_BACK_TIMEOUT_S)
    FIGURES["reboot: boot until all three serve, started by systemd alone"] = f"{time.monotonic() - started:.1f} s"
    for node_id in NODES:
        properties = machine.unit_properties(unit(node_id), "ActiveState", "NRestarts")
        assert properties == {"ActiveState": "active", "NRestarts": "0"}, (node_id, properties)
        shutdown = machine.journal(unit(node_id), boot="-1")
        assert "Deactivated successfully" in shutdown and "timed out" not in shutdown, shutdown[-2000:]
    assert_every_value_on_every_node(cluster, written)
