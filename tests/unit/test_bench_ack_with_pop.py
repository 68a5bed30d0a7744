"""The bench's "pop carrying the previous round's ack" phase: the etcd client's ack riding its pop's
Txn (against test_bench_etcd_sweeper.py's in-memory etcd), and the queue top-up before the phase."""

from __future__ import annotations

import asyncio

from bench import queue_throughput
from bench.peers import etcd_timers as keys
from bench.peers.etcd_client import EtcdEndpoint, EtcdTimerClient
from test_bench_etcd_sweeper import FakeEtcd


class FakeGateway:
    """etcd_gateway.AsyncGateway's call, answered by a FakeEtcd; counts the calls."""

    def __init__(self, etcd: FakeEtcd):
        self.etcd = etcd
        self.calls: list[str] = []

    async def call(self, path: str, body: dict, member: int | None = None) -> dict:
        self.calls.append(path)
        return self.etcd.call(path, body)

    async def close(self) -> None:
        pass


def leased(etcd: FakeEtcd) -> list[bytes]:
    return sorted(k for k in etcd.data if k.startswith(keys.LEASED))


async def etcd_client(etcd: FakeEtcd) -> tuple[EtcdTimerClient, FakeGateway]:
    """The bench's etcd client (its gateway needs a running loop), talking to `etcd`."""
    client = EtcdTimerClient(EtcdEndpoint(("http://unused",)))
    await client.gateway.close()
    gateway = FakeGateway(etcd)
    client.gateway = gateway
    return client, gateway


def test_the_etcd_ack_rides_the_pops_txn_two_requests_a_round():
    etcd = FakeEtcd()

    async def rounds() -> None:
        client, gateway = await etcd_client(etcd)
        await client.push([f"t{i}" for i in range(4)])
        first = await client.ack_then_pop([], 2)
        assert [m.txn for m in first] == ["t0", "t1"] and len(leased(etcd)) == 2
        gateway.calls.clear()
        second = await client.ack_then_pop(first, 2)
        assert [m.txn for m in second] == ["t2", "t3"]
        assert gateway.calls == ["/v3/kv/range", "/v3/kv/txn"]  # no ack call of its own
        assert leased(etcd) == sorted(m.ack_handle for m in second)

    asyncio.run(rounds())


def test_an_etcd_pop_that_loses_its_race_still_settles_the_ack_once():
    etcd = FakeEtcd()

    async def rounds() -> None:
        client, gateway = await etcd_client(etcd)
        await client.push([f"t{i}" for i in range(4)])
        first = await client.ack_then_pop([], 2)
        ready = sorted(k for k in etcd.data if k.startswith(keys.READY))

        def another_consumer_takes_one() -> None:  # between our range and our Txn
            etcd.call("/v3/kv/txn", {"compare": [], "success": [
                {"request_delete_range": {"key": keys.gw.b64(ready[0])}}]})

        etcd.after_range = another_consumer_takes_one
        gateway.calls.clear()
        second = await client.ack_then_pop(first, 2)
        assert [m.txn for m in second] == ["t3"]
        # The lost Txn deleted the acked keys in its failure branch; the retry carried no ack.
        assert gateway.calls == ["/v3/kv/range", "/v3/kv/txn", "/v3/kv/range", "/v3/kv/txn"]
        assert leased(etcd) == [m.ack_handle for m in second]

    asyncio.run(rounds())


def test_the_top_up_pushes_what_the_phase_may_take_in_calls_of_a_batch_with_new_txns():
    class Recorder:
        def __init__(self) -> None:
            self.pushed: list[list[str]] = []

        async def push(self, txns: list[str]) -> None:
            self.pushed.append(txns)

    recorder = Recorder()
    # 1,000 taken, 1,250 left: 3,000 wanted, so 1,750 missing, in 18 calls of 100.
    assert asyncio.run(queue_throughput.top_up(recorder, 2_250, 1_000)) == 1_800
    txns = [t for call in recorder.pushed for t in call]
    assert len(recorder.pushed) == 18 and all(len(call) == queue_throughput.BATCH for call in recorder.pushed)
    assert len(set(txns)) == len(txns)
    assert asyncio.run(queue_throughput.top_up(recorder, 10_000, 1_000)) == 0
