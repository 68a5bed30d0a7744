"""queen-raft as the system under test: the three-node local cluster and an HTTP client for it.

The cluster is tests/integration/cluster_fixture.py's NodeCluster (real node processes from a temp
config, stopped by PID), reused as it is.
"""

from __future__ import annotations

import asyncio
import compileall
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench.timer_service import PAYLOAD_B64, QUEUE, QueuedMessage, Receipt, ScheduleOp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from cluster_fixture import NodeCluster, pick_port_runs, token  # noqa: E402,F401  (a test module, imported by path)

TENANT = "acme"
# The per-node call rate limit (QUEEN_TIMERS_RATE, 1,000 calls/s by default) is a tenant quota,
# not a capacity: the benchmark turns it off to find what the cluster itself can take.
BENCH_SETTINGS = {"timers_rate": 0}
# A write that meets a leader change answers 503 (or the node is gone): the client retries it on
# the next node. Bounded so a dead cluster ends the run instead of spinning.
MAX_CALL_ATTEMPTS = 40
RETRY_PAUSE_S = 0.05
HTTP_TIMEOUT_S = 30.0
JSON_HEADERS = {"Content-Type": "application/json"}
# /api/v1/fetch takes up to 64 entries of up to 1,000 records each.
FETCH_ENTRIES_PER_CALL = 64
FETCH_RECORDS_PER_ENTRY = 1000


class CallFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class QueenEndpoint:
    urls: tuple[str, ...]  # the leader's first: writes go there unless it is gone
    token: str
    queue: str = QUEUE

    def open_client(self, concurrency: int = 1) -> "QueenClient":
        return QueenClient(self, concurrency)


class QueenClient:
    def __init__(self, endpoint: QueenEndpoint, concurrency: int = 1):
        self.endpoint = endpoint
        self._url_index = 0
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(1, concurrency) + 2, force_close=False),
            timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S),
            headers={"Authorization": f"Bearer {endpoint.token}"},
        )
        self.retries = 0

    async def _call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        """A call retried on another node when this one is unreachable or has no leader now.
        Every write here is idempotent (timers by key, pushes by txn), so a retry is safe.

        Bodies and answers go through orjson, not aiohttp's stdlib json: the generator shares the
        two cores with the nodes, and the stdlib's encode and parse of a 256-op call were 1.6 us
        of client CPU per op (the peers are driven by their own native clients alike)."""
        data = None if body is None else orjson.dumps(body)
        headers = None if body is None else JSON_HEADERS
        last = None
        for _ in range(MAX_CALL_ATTEMPTS):
            url = self.endpoint.urls[self._url_index] + path
            try:
                async with self._session.request(method, url, data=data, headers=headers) as response:
                    if response.status == 204:
                        return 204, None
                    raw = await response.read()
                    payload = orjson.loads(raw) if raw.strip() else None
                    if response.status == 503:
                        last = (response.status, payload)
                        self.retries += 1
                        await asyncio.sleep(RETRY_PAUSE_S)
                        continue
                    return response.status, payload
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
                last = repr(exc)
                self.retries += 1
                self._url_index = (self._url_index + 1) % len(self.endpoint.urls)
                await asyncio.sleep(RETRY_PAUSE_S)
        raise CallFailed(f"{method} {path}: no answer after {MAX_CALL_ATTEMPTS} attempts: {last}")

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        body = {"operations": [
            {"op": "schedule", "queue": self.endpoint.queue, "timerKey": op.key, "delayMs": op.delay_ms,
             "txn": op.txn, "payload": PAYLOAD_B64} for op in ops]}
        status, answer = await self._call("POST", "/api/v1/timers", body)
        if status != 200:
            raise CallFailed(f"schedule answered {status}: {answer}")
        return [result["deliverAt"] for result in answer["results"]]

    async def consume(self, max_batch: int, wait_s: float) -> list[Receipt]:
        path = (f"/api/v1/pop/queue/{self.endpoint.queue}?wait=true&timeout={int(wait_s * 1000)}"
                f"&batch={max_batch}&autoAck=true")
        status, answer = await self._call("GET", path)
        if status == 204:
            return []
        if status != 200:
            raise CallFailed(f"pop answered {status}: {answer}")
        return [Receipt(m["transactionId"], m["createdAt"]) for m in answer["messages"]]

    async def fired_log(self) -> list[Receipt]:
        fired: list[Receipt] = []
        offset = 0
        while True:
            entries = [{"queue": self.endpoint.queue, "partition": "Default",
                        "offset": offset + i * FETCH_RECORDS_PER_ENTRY, "limit": FETCH_RECORDS_PER_ENTRY}
                       for i in range(FETCH_ENTRIES_PER_CALL)]
            status, answer = await self._call("POST", "/api/v1/fetch", {"entries": entries})
            if status != 200:
                raise CallFailed(f"fetch answered {status}: {answer}")
            got = 0
            for entry in answer["entries"]:
                fired += [Receipt(record["transactionId"], record["createdAt"]) for record in entry["records"]]
                got += len(entry["records"])
            if got < FETCH_ENTRIES_PER_CALL * FETCH_RECORDS_PER_ENTRY:
                return fired
            offset += got

    async def pending(self) -> int:
        async with self._session.get(self.endpoint.urls[self._url_index] + "/metrics") as response:
            text = await response.text()
        for line in text.splitlines():
            if line.startswith("queen_timers_pending{") and f'tenant="{TENANT}"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
        raise CallFailed("/metrics has no queen_timers_pending for the tenant")

    async def push(self, txns: list[str]) -> None:
        body = {"items": [{"queue": self.endpoint.queue, "payloadB64": PAYLOAD_B64, "transactionId": txn}
                          for txn in txns]}
        status, answer = await self._call("POST", "/api/v1/push", body)
        if status != 201:
            raise CallFailed(f"push answered {status}: {answer}")

    async def pop(self, batch: int) -> list[QueuedMessage]:
        status, answer = await self._call("GET", f"/api/v1/pop/queue/{self.endpoint.queue}?batch={batch}")
        if status == 204:
            return []
        if status != 200:
            raise CallFailed(f"pop answered {status}: {answer}")
        return popped_messages(answer)

    async def ack(self, messages: list[QueuedMessage]) -> None:
        if not messages:
            return
        status, answer = await self._call("POST", "/api/v1/ack/batch", ack_body(messages))
        if status != 200 or not all(item["success"] for item in answer["results"]):
            raise CallFailed(f"ack answered {status}: {answer}")

    async def ack_then_pop(self, acked: list[QueuedMessage], batch: int) -> list[QueuedMessage]:
        """One call: POST pop with the ack batch's body, settled and popped in one Raft entry."""
        if not acked:
            return await self.pop(batch)
        status, answer = await self._call("POST", f"/api/v1/pop/queue/{self.endpoint.queue}?batch={batch}",
                                          ack_body(acked))
        if status != 200 or not all(item["success"] for item in answer["acknowledgments"]):
            raise CallFailed(f"ack + pop answered {status}: {answer}")
        return popped_messages(answer)

    async def close(self) -> None:
        await self._session.close()


def popped_messages(answer: dict) -> list[QueuedMessage]:
    return [QueuedMessage(m["transactionId"], (answer["leaseId"], m["partition"])) for m in answer["messages"]]


def ack_body(messages: list[QueuedMessage]) -> dict:
    """The ack batch's body for messages of one pop (one lease)."""
    return {"leaseId": messages[0].ack_handle[0], "acknowledgments": [
        {"partition": m.ack_handle[1], "transactionId": m.txn, "status": "completed"} for m in messages]}


def compile_bytecode() -> None:
    """Write queen_raft's bytecode (`__pycache__`, ignored by git) before the nodes start, as an
    installed node has it: pip compiles a wheel's modules at install. Started from the repo with
    PYTHONDONTWRITEBYTECODE set, nothing writes it, and every node start (the recovery scenario's
    restart too) would compile every module of the package from source again, which no deployed
    node does. compileall writes whatever that variable says; an up-to-date file is left alone."""
    compileall.compile_dir(REPO / "queen_raft", quiet=1)


class QueenCluster:
    """Three real nodes on 127.0.0.1 in a temp dir; the scenario talks to the tenant's leader."""

    name = "queen-raft"

    def __init__(self, node_count: int = 3, settings: dict | None = None):
        self._workdir = Path(tempfile.mkdtemp(prefix="queen-bench-"))
        self.cluster = NodeCluster(self._workdir, node_count=node_count, settings={**BENCH_SETTINGS, **(settings or {})})
        self.endpoint: QueenEndpoint | None = None

    def start(self) -> None:
        compile_bytecode()
        self.cluster.start()
        self.refresh_endpoint()

    def refresh_endpoint(self) -> None:
        """Points the endpoint at the current leader first (after a start or a failover)."""
        leader = self.leader()
        others = [n for n in self.cluster.node_ids if n != leader and self.cluster.running(n)]
        self.endpoint = QueenEndpoint(tuple(self.cluster.url(n) for n in [leader, *others]), token(TENANT, "read-write"))

    def leader(self) -> str:
        return self.cluster.role_of(TENANT, "leader")

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def node_data_dir(self, node_id: str) -> Path:
        return Path(getattr(self.cluster, "data_dir", self._workdir / "data")) / node_id

    def histogram(self, node_id: str, name: str, label: str = "") -> list[tuple[float, float]]:
        """Cumulative buckets [(le, count)] of a Prometheus histogram on /metrics (lines holding label)."""
        buckets = []
        for line in self.metrics_text(node_id).splitlines():
            if line.startswith(name + "_bucket{") and label in line:
                le_text = line.split('le="', 1)[1].split('"', 1)[0]
                buckets.append((float("inf") if le_text == "+Inf" else float(le_text), float(line.rsplit(" ", 1)[1])))
        return sorted(buckets)

    def pending_on(self, node_id: str) -> int | None:
        """queen_timers_pending as this node's own replica counts it."""
        for line in self.metrics_text(node_id).splitlines():
            if line.startswith("queen_timers_pending{") and f'tenant="{TENANT}"' in line:
                return int(float(line.rsplit(" ", 1)[1]))
        return None

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.cluster.processes.items() if p.poll() is None}

    def client(self, concurrency: int = 1) -> QueenClient:
        return self.endpoint.open_client(concurrency)

    def group_status(self, node_id: str) -> dict | None:
        status, body = self.cluster.health(node_id)
        if not isinstance(body, dict):
            return None
        return body.get("groups", {}).get(TENANT)

    def wait_caught_up(self, node_id: str, timeout_s: float) -> float | None:
        """Seconds until node_id serves /health 200 and has applied the leader's commit index."""
        started = time.monotonic()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            status, body = self.cluster.health(node_id)
            if status == 200:
                mine = body["groups"][TENANT]
                leader_id = self.leader()
                target = self.group_status(leader_id) or {}
                if mine.get("appliedIndex", -1) >= (target.get("commitIndex") or 0) - 1:
                    return time.monotonic() - started
            time.sleep(0.02)
        return None

    def metrics_text(self, node_id: str) -> str:
        _, _, body = self.cluster.call(node_id, "GET", "/metrics")
        return body if isinstance(body, str) else ""
