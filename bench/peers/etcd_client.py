"""The bench's client of the etcd timer design (etcd_timers.py), through the v3 JSON gateway: the
same TimerClient calls as ours and the other peers, for the same load generator."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections import deque
from dataclasses import dataclass

from bench.peers import etcd_gateway as gw
from bench.peers import etcd_timers as keys
from bench.timer_service import PAYLOAD, QUEUE, QueuedMessage, Receipt, ScheduleOp

FIRED_PAGE = 10_000
POP_LEASE_MS = 300_000   # as the Redis peer's lease
POP_ATTEMPTS = 5         # a pop that loses every race this many times in a row answers empty


@dataclass(frozen=True)
class EtcdEndpoint:
    urls: tuple[str, ...]

    def open_client(self, concurrency: int = 1) -> "EtcdTimerClient":
        return EtcdTimerClient(self, concurrency)


def now_ms() -> int:
    return int(time.time() * 1000)


class FiredWatch:
    """A watch on the fired prefix from a revision on, reopened on another member (from the last
    revision seen) when its stream ends; hands out receipts in fire order."""

    def __init__(self, gateway: gw.AsyncGateway):
        self.gateway = gateway
        self.next_revision: int | None = None
        self.ready: deque[Receipt] = deque()
        self._response = None
        self._buffer = b""

    async def _open(self) -> None:
        if self.next_revision is None:  # from now on: the revision after the current one
            answer = await self.gateway.call("/v3/kv/range", gw.range_request(
                keys.FIRED, gw.prefix_end(keys.FIRED), count_only=True))
            self.next_revision = int(answer["header"]["revision"]) + 1
        self._response = await self.gateway.open_stream("/v3/watch", {"create_request": {
            "key": gw.b64(keys.FIRED), "range_end": gw.b64(gw.prefix_end(keys.FIRED)),
            "start_revision": str(self.next_revision)}})
        self._buffer = b""

    def _take_lines(self) -> None:
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            result = json.loads(line).get("result", {})
            for event in result.get("events", ()):
                if event.get("type", "PUT") != "PUT":
                    continue
                kv = event["kv"]
                txn, fired_at = keys.parse_fired_value(gw.unb64(kv["value"]))
                self.ready.append(Receipt(txn, fired_at))
                self.next_revision = int(kv["mod_revision"]) + 1

    async def wait(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while not self.ready and time.monotonic() < deadline:
            try:
                if self._response is None:
                    await self._open()
                chunk = await asyncio.wait_for(self._response.content.readany(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                return
            except Exception:  # the member went away: reopen elsewhere from the last revision seen
                chunk = b""
            if not chunk:
                self.close()
                await asyncio.sleep(0.05)
                continue
            self._buffer += chunk
            self._take_lines()

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
        self._response = None


class EtcdTimerClient:
    def __init__(self, endpoint: EtcdEndpoint, concurrency: int = 1):
        self.gateway = gw.AsyncGateway(list(endpoint.urls), concurrency)
        self._watch: FiredWatch | None = None
        self._tag = f"{os.getpid()}.{id(self) & 0xffff:x}"
        self._serial = itertools.count()

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        start = now_ms()
        deliver = [start + op.delay_ms for op in ops]
        await self.gateway.call("/v3/kv/txn", keys.schedule_txn(
            [(QUEUE, op.key, at, op.txn, PAYLOAD) for op, at in zip(ops, deliver)]))
        return deliver

    async def consume(self, max_batch: int, wait_s: float) -> list[Receipt]:
        if self._watch is None:
            self._watch = FiredWatch(self.gateway)
        await self._watch.wait(wait_s)
        ready = self._watch.ready
        return [ready.popleft() for _ in range(min(max_batch, len(ready)))]

    async def fired_log(self) -> list[Receipt]:
        fired, start = [], keys.FIRED
        while True:
            answer = await self.gateway.call("/v3/kv/range", gw.range_request(
                start, gw.prefix_end(keys.FIRED), limit=FIRED_PAGE))
            page = gw.kvs(answer)
            fired += [Receipt(*keys.parse_fired_value(kv["value"])) for kv in page]
            if not answer.get("more"):
                return fired
            start = page[-1]["key"] + b"\0"

    async def pending(self) -> int:
        answer = await self.gateway.call("/v3/kv/range", gw.range_request(
            keys.TIMERS, gw.prefix_end(keys.TIMERS), count_only=True))
        return int(answer.get("count", 0))

    async def push(self, txns: list[str]) -> None:
        clock = time.time_ns()
        await self.gateway.call("/v3/kv/txn", gw.txn([], [
            gw.put(keys.READY + keys.queue_message_id(clock, self._tag, next(self._serial)),
                   t.encode() + b"\0" + PAYLOAD) for t in txns]))

    async def pop(self, batch: int) -> list[QueuedMessage]:
        return await self.ack_then_pop([], batch)

    async def ack_then_pop(self, acked: list[QueuedMessage], batch: int) -> list[QueuedMessage]:
        """The pop's own two requests (a linearizable range of the ready keys, then the Txn that
        moves them, compared on the revisions the range read), the acked keys' deletes riding in
        that Txn. One Txn cannot do both: the pop's compare needs what its range read first."""
        settle = [m.ack_handle for m in acked]
        for _ in range(POP_ATTEMPTS):
            answer = await self.gateway.call("/v3/kv/range", gw.range_request(
                keys.READY, gw.prefix_end(keys.READY), limit=batch))
            ready = gw.kvs(answer)
            if not ready:
                break
            taken = await self.gateway.call("/v3/kv/txn", keys.pop_txn(ready, now_ms() + POP_LEASE_MS, settle))
            settle = []  # the Txn deleted them in either branch
            if taken.get("succeeded"):
                return [QueuedMessage(kv["value"].split(b"\0", 1)[0].decode(),
                                      keys.LEASED + kv["key"][len(keys.READY):]) for kv in ready]
        if settle:
            await self.ack(acked)
        return []

    async def ack(self, messages: list[QueuedMessage]) -> None:
        if messages:
            await self.gateway.call("/v3/kv/txn", gw.txn([], [gw.delete(m.ack_handle) for m in messages]))

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        await self.gateway.close()
