"""kill -9 of the node the SDK is talking to (the tenant's leader): the SDK fails over and keeps
working, and nothing it was told succeeded is lost."""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest

from cluster_fixture import node_cluster, token  # noqa: F401  (node_cluster is a fixture)
from queen_raft.client import Queen

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
# Schedules made one after another while the kill happens: enough that some run before it, some
# during the election and some after it.
WRITES = 40
KILL_AFTER_WRITES = 5


async def test_kill_9_of_the_leader_in_the_url_list_and_the_sdk_keeps_working(node_cluster):
    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    ordered = [leader] + [n for n in cluster.node_ids if n != leader]
    queue = f"failover-{uuid.uuid4().hex[:8]}"
    acknowledged: dict[str, str] = {}
    killed = asyncio.Event()

    async with Queen(urls=[cluster.url(n) for n in ordered], token=RW) as q:
        await q.timer(queue).key("before").delay("1h").payload("before").schedule()
        assert q.transport.current_url == cluster.url(leader)

        async def writer() -> None:
            for i in range(WRITES):
                key = f"k{i:03d}"
                result = await q.timer(queue).key(key).delay("1h").payload({"i": i}).schedule()
                assert result.ok
                acknowledged[key] = result.txn
                if i == KILL_AFTER_WRITES:
                    killed.set()

        async def killer() -> None:
            await killed.wait()
            code = await asyncio.to_thread(cluster.stop_node, leader, signal.SIGKILL)
            assert code == -signal.SIGKILL

        try:
            await asyncio.gather(writer(), killer())
            assert q.transport.current_url != cluster.url(leader)
            assert q.transport.failed_attempts >= 1  # the dead node was asked at least once, then left
            assert len(acknowledged) == WRITES
            # Every acknowledged schedule is there, with the txn the SDK was answered, read through the SDK.
            rows = {row.timer_key: row.txn async for row in q.timer(queue).rows(page_size=16)}
            assert rows == {"before": rows["before"], **acknowledged}
            pushed = await q.push(queue, {"after": "kill"})
            [message] = await q.pop(queue, wait="2s")
            assert message.transaction_id == pushed.transaction_id
            await message.ack()
        finally:
            if not cluster.running(leader):  # the fixture stops every node with SIGTERM and checks it
                cluster.start_node(leader)
                await asyncio.to_thread(cluster.wait_ready)
