"""Peer 1: a Redis sorted-set delay queue, the pattern behind arq, RQ-scheduler and BullMQ.

A timer is a member of a sorted set scored by its deliverAt (ms) with its job in a hash; a poller
process wakes every POLL_INTERVAL_S, moves what is due into a stream (the destination log) with a
Lua script, atomically, and loops at once while a full batch was due. Consumers read the stream
with a blocking XREAD from their cursor, as our consumers long-poll the partition log. The server
runs single-node, unreplicated, with AOF everysec: its best durable configuration short of fsync
per write (which would cost it its lead in throughput).

Run alone as the poller: `python -m bench.peers.redis_delay_queue poll --port N`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.peers.worker_loop import run_until_sigterm
from bench.timer_service import PAYLOAD, QueuedMessage, Receipt, ScheduleOp

# The default poll of those libraries is coarser (arq 0.5 s, RQ-scheduler 1 s); 50 ms is the
# tightest that stays cheap when idle, and what the reference figures of the contract's design used.
POLL_INTERVAL_S = 0.05
# Due timers moved per script call: large enough to drain fast, small enough that one call does
# not block the single-threaded server for long (~1,000 members is ~1-2 ms of Lua).
MOVE_BATCH = 1000
READY_WAIT_S = 10.0
SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 30.0

DELAYED = "bench:delayed"   # sorted set: timerKey -> deliverAt
JOBS = "bench:jobs"         # hash: timerKey -> txn \0 deliverAt \0 payload
FIRED = "bench:fired"       # stream: one entry per fire {txn, deliverAt, firedAt}
QUEUE = "bench:queue"       # list: pushed messages waiting
LEASED = "bench:leased"     # hash: txn -> lease deadline (a reliable-queue lease, as BullMQ's active list)

MOVE_DUE_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, key in ipairs(due) do
  local job = redis.call('HGET', KEYS[2], key)
  if job then
    local sep1 = string.find(job, '\\0', 1, true)
    local sep2 = string.find(job, '\\0', sep1 + 1, true)
    redis.call('XADD', KEYS[3], '*', 'txn', string.sub(job, 1, sep1 - 1),
               'deliverAt', string.sub(job, sep1 + 1, sep2 - 1), 'firedAt', ARGV[1],
               'payload', string.sub(job, sep2 + 1))
  end
end
if #due > 0 then
  redis.call('HDEL', KEYS[2], unpack(due))
  redis.call('ZREM', KEYS[1], unpack(due))
end
return #due
"""

POP_LUA = """
local items = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #items > 0 then
  redis.call('LTRIM', KEYS[1], #items, -1)
  for _, item in ipairs(items) do redis.call('HSET', KEYS[2], item, ARGV[2]) end
end
return items
"""


@dataclass(frozen=True)
class RedisEndpoint:
    port: int

    def open_client(self, concurrency: int = 1) -> "RedisDelayQueueClient":
        return RedisDelayQueueClient(self, concurrency)


def now_ms() -> int:
    return int(time.time() * 1000)


class RedisDelayQueueClient:
    def __init__(self, endpoint: RedisEndpoint, concurrency: int = 1):
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis(host="127.0.0.1", port=endpoint.port,
                                     max_connections=max(1, concurrency) + 2, decode_responses=False)
        self._pop = self._redis.register_script(POP_LUA)
        self._cursor: bytes | None = None  # where consume() reads from: the stream's end when first called

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        start = now_ms()
        deliver = [start + op.delay_ms for op in ops]
        pipe = self._redis.pipeline(transaction=True)  # MULTI/EXEC: the batch is atomic, as ours
        pipe.hset(JOBS, mapping={op.key: b"%s\0%d\0%s" % (op.txn.encode(), at, PAYLOAD) for op, at in zip(ops, deliver)})
        pipe.zadd(DELAYED, {op.key: at for op, at in zip(ops, deliver)})
        await pipe.execute()
        return deliver

    async def consume(self, max_batch: int, wait_s: float) -> list[Receipt]:
        if self._cursor is None:
            last = await self._redis.xrevrange(FIRED, count=1)
            self._cursor = last[0][0] if last else b"0-0"
        answer = await self._redis.xread({FIRED: self._cursor}, count=max_batch, block=max(1, int(wait_s * 1000)))
        receipts = []
        for _, entries in answer or ():
            for entry_id, fields in entries:
                self._cursor = entry_id
                receipts.append(Receipt(fields[b"txn"].decode(), int(fields[b"firedAt"])))
        return receipts

    async def fired_log(self) -> list[Receipt]:
        fired, start = [], "-"
        while True:
            chunk = await self._redis.xrange(FIRED, min=start, max="+", count=10_000)
            if not chunk:
                return fired
            fired += [Receipt(fields[b"txn"].decode(), int(fields[b"firedAt"])) for _, fields in chunk]
            start = "(" + chunk[-1][0].decode()

    async def pending(self) -> int:
        return int(await self._redis.zcard(DELAYED))

    async def push(self, txns: list[str]) -> None:
        await self._redis.rpush(QUEUE, *[t.encode() + b"\0" + PAYLOAD for t in txns])

    async def pop(self, batch: int) -> list[QueuedMessage]:
        items = await self._pop(keys=[QUEUE, LEASED], args=[batch, now_ms() + 300_000])
        return [QueuedMessage(item.split(b"\0", 1)[0].decode(), item) for item in items]

    async def ack(self, messages: list[QueuedMessage]) -> None:
        if messages:
            await self._redis.hdel(LEASED, *[m.ack_handle for m in messages])

    async def ack_then_pop(self, acked: list[QueuedMessage], batch: int) -> list[QueuedMessage]:
        """One pipeline, one round trip: HDEL of the acked leases, then the pop script by its SHA
        (not MULTI/EXEC: each command is atomic alone and the pair need not be). The script is
        loaded by a plain pop first, and again if the server lost it."""
        if not acked:
            return await self.pop(batch)
        import redis

        for _ in range(2):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hdel(LEASED, *[m.ack_handle for m in acked])
            pipe.evalsha(self._pop.sha, 2, QUEUE, LEASED, batch, now_ms() + 300_000)
            try:
                _, items = await pipe.execute()
            except redis.exceptions.NoScriptError:
                await self._redis.script_load(POP_LUA)
                continue
            return [QueuedMessage(item.split(b"\0", 1)[0].decode(), item) for item in items]
        raise RuntimeError("the pop script could not be loaded")

    async def info_memory(self) -> int:
        return int((await self._redis.info("memory"))["used_memory"])

    async def close(self) -> None:
        await self._redis.aclose()


def run_poller(port: int) -> None:
    """The scheduler worker: every POLL_INTERVAL_S, move due timers into the stream."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    move = client.register_script(MOVE_DUE_LUA)
    # A restarting server refuses for a moment: keep polling.
    run_until_sigterm(lambda: move(keys=[DELAYED, JOBS, FIRED], args=[now_ms(), MOVE_BATCH]), MOVE_BATCH,
                      POLL_INTERVAL_S, (redis.ConnectionError, redis.BusyLoadingError))


class RedisDelayQueue:
    """redis-server on a free loopback port with its own data dir, and the poller process."""

    name = "redis"

    def __init__(self, port: int):
        self.port = port
        self.endpoint = RedisEndpoint(port)
        self.data_dir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
        self.server: subprocess.Popen | None = None
        self.poller: subprocess.Popen | None = None

    def start_server(self) -> float:
        """Starts redis-server (loading the AOF if one is there); seconds until it answers PING."""
        import redis

        started = time.monotonic()
        log = open(self.data_dir / "redis.log", "ab")
        self.server = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             "--protected-mode", "yes", "--io-threads", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        probe = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = started + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if probe.ping() and probe.info("persistence").get("loading") == 0:
                    probe.close()
                    return time.monotonic() - started
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if self.server.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.data_dir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.01)
        raise RuntimeError(f"redis-server not ready in {SERVER_START_TIMEOUT_S} s")

    def start_poller(self) -> None:
        self.poller = subprocess.Popen([sys.executable, "-m", "bench.peers.redis_delay_queue", "poll",
                                        "--port", str(self.port)], cwd=Path(__file__).resolve().parents[2])

    def start(self) -> None:
        self.start_server()
        self.start_poller()

    def kill_server(self) -> None:
        """kill -9 of the server (a crash): AOF everysec may lose the last second of writes."""
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.wait()

    def restart_after_crash(self) -> float:
        """kill -9, then start it again at once as a supervisor would; seconds until it serves."""
        self.kill_server()
        return self.start_server()

    def stop(self) -> None:
        for proc in (self.poller, self.server):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        found = {}
        if self.server is not None and self.server.poll() is None:
            found["redis-server"] = self.server.pid
        if self.poller is not None and self.poller.poll() is None:
            found["poller"] = self.poller.pid
        return found

    def client(self, concurrency: int = 1) -> RedisDelayQueueClient:
        return self.endpoint.open_client(concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["poll"])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    run_poller(args.port)


if __name__ == "__main__":
    main()
