"""A retried ack over real nodes: the answer of an applied ack is lost (the leader is killed after
the commit, before its answer reaches the client), the SDK retries on another node, and the retry
answers as the first did instead of `invalid_lease`."""

from __future__ import annotations

import asyncio
import signal
import uuid
from typing import Callable

import pytest

from cluster_fixture import node_cluster, token  # noqa: F401  (node_cluster is a fixture)
from queen_raft.client import Queen, RetryPolicy

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
# Long enough for an election and the commit of the retry after a kill -9 of the leader.
RETRY_BUDGET_S = 30.0


class AnswerDroppingProxy:
    """A TCP proxy in front of one node. Once armed, the next answer that node sends is never
    delivered: on its first bytes `on_answer` runs (here: kill the node), then the client's
    connection is closed. So the request was applied and its answer lost, as on a crash."""

    def __init__(self, port: int, on_answer: Callable[[], None]) -> None:
        self.target_port = port
        self.on_answer = on_answer
        self.armed = False
        self.dropped = 0
        self.server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> "AnswerDroppingProxy":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_exc) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            node_reader, node_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        upstream = asyncio.ensure_future(self._pipe(client_reader, node_writer))
        try:
            while chunk := await node_reader.read(65536):
                if self.armed:
                    self.armed = False
                    self.dropped += 1
                    await asyncio.to_thread(self.on_answer)
                    break
                client_writer.write(chunk)
                await client_writer.drain()
        except OSError:
            pass
        finally:
            upstream.cancel()
            client_writer.close()
            node_writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass


def ack_body(lease_id: str, *acks: dict) -> dict:
    return {"leaseId": lease_id, "acknowledgments": list(acks)}


async def test_an_ack_whose_answer_died_with_the_leader_is_answered_again_on_another_node(node_cluster):
    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    others = [n for n in cluster.node_ids if n != leader]
    queue = f"ackretry-{uuid.uuid4().hex[:8]}"

    def kill_leader() -> None:
        assert cluster.stop_node(leader, signal.SIGKILL) == -signal.SIGKILL

    try:
        async with AnswerDroppingProxy(cluster.http_ports[leader], kill_leader) as proxy:
            urls = [proxy.url, *(cluster.url(n) for n in others)]
            async with Queen(urls=urls, token=RW, retry=RetryPolicy(budget_s=RETRY_BUDGET_S, max_attempts=40)) as q:
                for n in range(3):
                    await q.push(queue, {"n": n}, txn=f"{queue}-{n}")
                messages = await q.pop(queue, batch=3, wait="2s")
                assert [m.transaction_id for m in messages] == [f"{queue}-{n}" for n in range(3)]
                assert q.transport.current_url == proxy.url
                # One ack per message, the lease still holding the other two when the answer is lost.
                proxy.armed = True
                result = await messages[0].ack()
                assert proxy.dropped == 1 and not cluster.running(leader)
                assert (result.success, result.dlq, result.retried) == (True, False, True)
                assert q.transport.current_url != proxy.url
                # The lease survived the failover: its other messages settle on the new leader.
                assert (await messages[1].dead_letter("poison")).dlq is True
                assert (await messages[2].ack()).success is True
                # Nothing is delivered again: the first ack was applied once, before the kill.
                assert await q.pop(queue, wait="0s") == []
                assert len(await q.dlq(queue)) == 1
        lease_id = messages[0].lease_id
        # The same ack call sent to each surviving node, now that its acks released the lease,
        # answers what the first answered, and changes nothing.
        repeat = ack_body(lease_id, {"queue": queue, "partition": "Default", "transactionId": f"{queue}-0",
                                     "status": "completed"},
                          {"queue": queue, "partition": "Default", "offset": messages[1].offset, "status": "dlq",
                           "error": "poison"})
        for node in others:
            status, _, body = await asyncio.to_thread(cluster.call, node, "POST", "/api/v1/ack/batch", RW, repeat)
            assert status == 200, body
            assert body["results"] == [{"index": 0, "success": True, "dlq": False},
                                       {"index": 1, "success": True, "dlq": True}]
        status, _, body = await asyncio.to_thread(cluster.call, others[0], "POST", "/api/v1/ack", RW, {
            "leaseId": lease_id, "offset": messages[0].offset, "status": "failed"})
        assert body["results"][0] == {"index": 0, "success": False, "error": "invalid_lease", "dlq": False,
                                      "message": "already settled as completed"}
    finally:
        if not cluster.running(leader):  # the fixture stops every node with SIGTERM and checks it
            cluster.start_node(leader)
            await asyncio.to_thread(cluster.wait_ready)
