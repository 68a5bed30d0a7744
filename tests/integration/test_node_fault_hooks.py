"""The node pieces the fault harness uses, on real node processes: `[nodes.dial]` routes every tenant's
Raft link through a proxy (so cutting the proxies isolates a node in every group), 503s carry their
reason, and the test-hooks clock route moves a running node's clock without a restart."""

from __future__ import annotations

import base64
import time

import pytest
from cluster_fixture import TENANTS, NodeCluster, pick_port_runs, token

from jepsen.network import LinkNetwork, grudge_links, isolate
from queen_raft.api.errors import RAFT_UNAVAILABLE_REASONS

HOST = "127.0.0.1"
# Short commits, so a write through an isolated node answers its 503 within a second.
COMMIT_TIMEOUT_MS = 1000
# An isolated leader steps down after the 2.5 s fallback, then the majority elects (~0.3 s, up to
# ~2 s after a loss); the rest is room for a loaded 2-core machine.
PARTITION_SETTLE_S = 15.0
# After a heal, pysyncobj redials within connection_retry_s (0.5 s) and the node catches up.
HEAL_SETTLE_S = 15.0
RETRY_PAUSE_S = 0.2
CLOCK_JUMP_MS = 120_000
DELAY_MS = 60_000
PAYLOAD = base64.b64encode(b"{}").decode()


class DialledCluster(NodeCluster):
    """Every node dials every peer through a proxy of its own, one per tenant port of the link."""

    def __init__(self, workdir):
        super().__init__(workdir, settings={"commit_timeout_ms": COMMIT_TIMEOUT_MS}, env={"QUEEN_TEST_HOOKS": "1"})
        self.network: LinkNetwork | None = None

    def _proxy_base(self, reserved: set[int]) -> int:
        while True:
            base = pick_port_runs(1, len(TENANTS))[0]
            run = set(range(base, base + len(TENANTS)))
            if not run & reserved:
                reserved |= run
                return base

    def write_config(self) -> None:
        super().write_config()
        if self.network is not None:
            self.network.close()
        self.network = LinkNetwork(HOST)
        reserved = {p + i for p in [*self.http_ports.values(), *self.raft_ports.values()] for i in range(len(TENANTS))}
        lines = []
        for line in self.config_path.read_text().splitlines():
            lines.append(line)
            for node_id in self.node_ids:
                if line != f"raft_port = {self.raft_ports[node_id]}":
                    continue
                lines.append("[nodes.dial]")
                for peer in self.node_ids:
                    if peer == node_id:
                        continue
                    base = self._proxy_base(reserved)
                    for offset in range(len(TENANTS)):
                        self.network.add_link(node_id, peer, self.raft_ports[peer] + offset, listen_port=base + offset)
                    lines.append(f'"{HOST}:{self.raft_ports[peer]}" = "{HOST}:{base}"')
        self.config_path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def dialled(tmp_path_factory):
    cluster = DialledCluster(tmp_path_factory.mktemp("dialled"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if cluster.network is not None:
            cluster.network.close()


def schedule(key: str, delay_ms: int = DELAY_MS) -> list[dict]:
    return [{"op": "schedule", "queue": "q", "timerKey": key, "delayMs": delay_ms, "txn": f"t-{key}", "payload": PAYLOAD}]


def until(deadline_s: float, attempt):
    """attempt() until it returns something truthy; the last answer either way."""
    deadline = time.monotonic() + deadline_s
    answer = attempt()
    while not answer and time.monotonic() < deadline:
        time.sleep(RETRY_PAUSE_S)
        answer = attempt()
    return answer


def test_cutting_the_proxies_isolates_a_node_in_every_tenant_group_and_healing_brings_it_back(dialled):
    ids = dialled.node_ids
    dialled.network.cut(grudge_links(isolate("n1", ids)))
    try:
        for tenant in TENANTS:
            rw = token(tenant, "read-write")

            def refused_by_n1():
                status, _, body = dialled.call("n1", "POST", "/api/v1/timers", rw, schedule(f"via-n1-{tenant}"))
                return body if status == 503 else None

            body = until(PARTITION_SETTLE_S, refused_by_n1)
            assert body and body["error"] == "timers_unavailable", (tenant, body)
            assert body["reason"] in RAFT_UNAVAILABLE_REASONS

            def accepted_by_majority():
                status, _, body = dialled.call("n2", "POST", "/api/v1/timers", rw, schedule(f"during-cut-{tenant}"))
                return status == 200 and body["results"][0]["ok"]

            assert until(PARTITION_SETTLE_S, accepted_by_majority), tenant
    finally:
        dialled.network.heal()
    for tenant in TENANTS:
        rw = token(tenant, "read-write")

        def n1_sees_the_write_made_during_the_cut():
            status, _, body = dialled.call("n1", "GET", f"/api/v1/timers/q/during-cut-{tenant}", rw)
            return status == 200 and body["found"]

        assert until(HEAL_SETTLE_S, n1_sees_the_write_made_during_the_cut), tenant


def test_the_clock_route_moves_a_running_node_and_its_stamps_only(dialled):
    dialled.wait_ready()
    leader = dialled.role_of("acme", "leader")
    other = next(n for n in dialled.node_ids if n != leader)
    admin = token("acme", "admin")
    status, _, moved = dialled.call(leader, "POST", "/api/v1/test/clock", admin, {"offsetMs": CLOCK_JUMP_MS})
    assert (status, moved["node"], moved["offsetMs"]) == (200, leader, CLOCK_JUMP_MS)
    try:
        assert dialled.call(other, "GET", "/api/v1/test/clock", admin)[2]["offsetMs"] == 0
        # The leader stamps what it proposes with its moved clock: the group's now jumps with it.
        before_ms = int(time.time() * 1000)
        status, _, body = dialled.call(leader, "POST", "/api/v1/timers", token("acme", "read-write"),
                                       schedule("jumped"))
        assert status == 200
        assert body["results"][0]["deliverAt"] - before_ms >= CLOCK_JUMP_MS + DELAY_MS
    finally:
        status, _, back = dialled.call(leader, "POST", "/api/v1/test/clock", admin, {"offsetMs": 0})
    assert (status, back["offsetMs"]) == (200, 0)
    assert abs(back["wallMs"] - int(time.time() * 1000)) < CLOCK_JUMP_MS // 2
