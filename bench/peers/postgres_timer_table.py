"""Peer 2: a PostgreSQL timer table fired with FOR UPDATE SKIP LOCKED (the design of Queen MQ's
PostgreSQL timers, db-scheduler, procrastinate).

A timer is a row keyed by (queue, timer_key) with its deliver_at (ms on the server's clock); a
poller process wakes every POLL_INTERVAL_S and, in one transaction, deletes a batch of due rows
(SKIP LOCKED, so several pollers could share the table) and inserts them into the `fired` table
(the destination log) with a NOTIFY; it loops at once while a full batch was due. Consumers read
`fired` from their cursor and wait on LISTEN, as our consumers long-poll the partition log.
Single node, unreplicated, synchronous_commit on (every acknowledged write is fsynced).

Run alone as the poller: `python -m bench.peers.postgres_timer_table poll --dsn ...`.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.peers.debian_packages import postgres_bin_dir
from bench.process_usage import children_of
from bench.timer_service import PAYLOAD, QUEUE, QueuedMessage, Receipt, ScheduleOp

POLL_INTERVAL_S = 0.05  # as the Redis poller: the cadence the reference figures of the contract's design used
FIRE_BATCH = 1000       # rows per fire transaction (as the Redis poller's move batch)
SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 60.0
OS_USER = "postgres"    # PostgreSQL refuses to run as root
# Its best configuration on this machine for this load: enough shared buffers for a million rows,
# checkpoints spaced out so none lands inside a measurement; durability left on.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1", "synchronous_commit": "on", "fsync": "on",
    "shared_buffers": "512MB", "max_wal_size": "8GB", "checkpoint_timeout": "30min",
    "wal_level": "minimal", "max_wal_senders": "0", "max_connections": "100",
    "autovacuum": "on",
    # Statistics for a freshly loaded table within a second, as a long-running table has them: at
    # the default 60 s nap, the first part of a million-timer drain runs on a plan made without
    # statistics, many times slower (docs/performance.md).
    "autovacuum_naptime": "1s",
}
NOW_MS_SQL = "(extract(epoch from clock_timestamp()) * 1000)::bigint"

SCHEMA = """
CREATE TABLE IF NOT EXISTS timers (
  queue text NOT NULL, timer_key text NOT NULL, txn text NOT NULL, deliver_at bigint NOT NULL,
  payload bytea NOT NULL, PRIMARY KEY (queue, timer_key));
CREATE INDEX IF NOT EXISTS timers_due ON timers (deliver_at);
CREATE TABLE IF NOT EXISTS fired (
  id bigserial PRIMARY KEY, queue text NOT NULL, txn text NOT NULL, deliver_at bigint NOT NULL,
  fired_at bigint NOT NULL, payload bytea NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
  id bigserial PRIMARY KEY, queue text NOT NULL, txn text NOT NULL, payload bytea NOT NULL,
  leased_until bigint);
"""

SCHEDULE_SQL = f"""
INSERT INTO timers (queue, timer_key, txn, deliver_at, payload)
SELECT %(queue)s, k, t, {NOW_MS_SQL} + d, %(payload)s
FROM unnest(%(keys)s::text[], %(txns)s::text[], %(delays)s::bigint[]) AS o(k, t, d)
ON CONFLICT (queue, timer_key) DO UPDATE SET txn = excluded.txn, deliver_at = excluded.deliver_at,
  payload = excluded.payload
RETURNING timer_key, deliver_at
"""

FIRE_SQL = f"""
WITH due AS (
  SELECT queue, timer_key FROM timers WHERE deliver_at <= {NOW_MS_SQL}
  ORDER BY deliver_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
gone AS (
  DELETE FROM timers t USING due WHERE t.queue = due.queue AND t.timer_key = due.timer_key
  RETURNING t.queue, t.txn, t.deliver_at, t.payload)
INSERT INTO fired (queue, txn, deliver_at, fired_at, payload)
SELECT queue, txn, deliver_at, {NOW_MS_SQL}, payload FROM gone ORDER BY deliver_at
"""

POP_SQL = f"""
UPDATE messages SET leased_until = {NOW_MS_SQL} + 300000
WHERE id IN (SELECT id FROM messages WHERE queue = %(queue)s AND leased_until IS NULL
             ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING id, txn
"""

# The ack and the next pop as one statement: one transaction (autocommit), one round trip (a
# prepared statement's Bind/Execute/Sync go out together). The acked rows are leased, so the pop's
# subquery (leased_until IS NULL) never sees them, whichever order the two parts run in.
ACK_THEN_POP_SQL = f"""
WITH acked AS (DELETE FROM messages WHERE id = ANY(%(ids)s))
UPDATE messages SET leased_until = {NOW_MS_SQL} + 300000
WHERE id IN (SELECT id FROM messages WHERE queue = %(queue)s AND leased_until IS NULL
             ORDER BY id LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING id, txn
"""

@dataclass(frozen=True)
class PostgresEndpoint:
    dsn: str

    def open_client(self, concurrency: int = 1) -> "PostgresTimerTableClient":
        return PostgresTimerTableClient(self, concurrency)


class PostgresTimerTableClient:
    """Opens up to `concurrency` connections lazily, one per concurrent call (like a pool)."""

    def __init__(self, endpoint: PostgresEndpoint, concurrency: int = 1):
        self.endpoint = endpoint
        self._idle: list = []
        self._all: list = []
        self._listener = None
        self._cursor: int | None = None  # the last fired id read: the table's end when first called

    async def _take(self):
        import psycopg

        if self._idle:
            return self._idle.pop()
        conn = await psycopg.AsyncConnection.connect(self.endpoint.dsn, autocommit=True)
        self._all.append(conn)
        return conn

    async def _run(self, sql: str, params: dict, fetch: bool = True) -> list:
        import psycopg

        conn = await self._take()
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql, params, prepare=True)
                rows = await cur.fetchall() if fetch else []
        except psycopg.OperationalError:  # the server went away: drop the connection, the caller retries
            self._all.remove(conn)
            await conn.close()
            raise
        self._idle.append(conn)
        return rows

    async def schedule(self, ops: list[ScheduleOp]) -> list[int]:
        rows = await self._run(SCHEDULE_SQL, {
            "queue": QUEUE, "payload": PAYLOAD, "keys": [o.key for o in ops], "txns": [o.txn for o in ops],
            "delays": [o.delay_ms for o in ops]})
        by_key = dict(rows)
        return [by_key[o.key] for o in ops]

    async def consume(self, max_batch: int, wait_s: float) -> list[Receipt]:
        import psycopg

        if self._listener is None:
            self._listener = await psycopg.AsyncConnection.connect(self.endpoint.dsn, autocommit=True)
            await self._listener.execute("LISTEN fired")
            row = await (await self._listener.execute("SELECT coalesce(max(id), 0) FROM fired")).fetchone()
            self._cursor = row[0]
        deadline = time.monotonic() + wait_s
        while True:
            async with self._listener.cursor() as cur:
                await cur.execute("SELECT id, txn, fired_at FROM fired WHERE id > %s ORDER BY id LIMIT %s",
                                  (self._cursor, max_batch), prepare=True)
                rows = await cur.fetchall()
            if rows:
                self._cursor = rows[-1][0]
                return [Receipt(txn, fired_at) for _, txn, fired_at in rows]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            async for _ in self._listener.notifies(timeout=remaining, stop_after=1):
                pass

    async def fired_log(self) -> list[Receipt]:
        rows = await self._run("SELECT txn, fired_at FROM fired ORDER BY id", {})
        return [Receipt(txn, fired_at) for txn, fired_at in rows]

    async def pending(self) -> int:
        rows = await self._run("SELECT count(*) FROM timers", {})
        return int(rows[0][0])

    async def push(self, txns: list[str]) -> None:
        await self._run("INSERT INTO messages (queue, txn, payload) SELECT %(queue)s, t, %(payload)s "
                        "FROM unnest(%(txns)s::text[]) AS t", {"queue": QUEUE, "payload": PAYLOAD, "txns": txns},
                        fetch=False)

    async def pop(self, batch: int) -> list[QueuedMessage]:
        rows = await self._run(POP_SQL, {"queue": QUEUE, "batch": batch})
        return [QueuedMessage(txn, row_id) for row_id, txn in rows]

    async def ack(self, messages: list[QueuedMessage]) -> None:
        if messages:
            await self._run("DELETE FROM messages WHERE id = ANY(%(ids)s)", {"ids": [m.ack_handle for m in messages]},
                            fetch=False)

    async def ack_then_pop(self, acked: list[QueuedMessage], batch: int) -> list[QueuedMessage]:
        if not acked:
            return await self.pop(batch)
        rows = await self._run(ACK_THEN_POP_SQL, {"ids": [m.ack_handle for m in acked], "queue": QUEUE, "batch": batch})
        return [QueuedMessage(txn, row_id) for row_id, txn in rows]

    async def table_bytes(self) -> int:
        rows = await self._run("SELECT pg_total_relation_size('timers')", {})
        return int(rows[0][0])

    async def close(self) -> None:
        for conn in self._all + ([self._listener] if self._listener else []):
            await conn.close()


def run_poller(dsn: str) -> None:
    import psycopg

    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    conn = None
    while not stopping:
        moved = 0
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(dsn, autocommit=False)
            with conn.cursor() as cur:
                cur.execute(FIRE_SQL, {"batch": FIRE_BATCH}, prepare=True)
                moved = cur.rowcount
                if moved:
                    cur.execute("NOTIFY fired")
            conn.commit()
        except psycopg.OperationalError:  # the server restarts: reconnect on the next poll
            conn = None
        if moved < FIRE_BATCH:
            time.sleep(POLL_INTERVAL_S)
    if conn is not None:
        conn.close()


class PostgresTimerTable:
    """A PostgreSQL cluster (initdb) in a temp dir on a free loopback port, and the poller process."""

    name = "postgres"

    def __init__(self, port: int):
        self.port = port
        self.bin_dir = postgres_bin_dir()
        if self.bin_dir is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.root = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "socket"
        self.endpoint = PostgresEndpoint(f"host=127.0.0.1 port={port} user=postgres dbname=postgres")
        self.server: subprocess.Popen | None = None
        self.poller: subprocess.Popen | None = None

    def _chown_tree(self) -> None:
        user = pwd.getpwnam(OS_USER)
        for path in [self.root, *self.root.rglob("*")]:
            os.chown(path, user.pw_uid, user.pw_gid)

    def initdb(self) -> None:
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self._chown_tree()
        subprocess.run([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                        "--no-sync", "-E", "UTF8"], check=True, user=OS_USER, stdout=subprocess.DEVNULL,
                       stderr=subprocess.STDOUT)

    def start_server(self) -> float:
        """Starts the postmaster (crash recovery included); seconds until it answers a query."""
        import psycopg

        started = time.monotonic()
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                "-k", str(self.socket_dir)]
        for key, value in SERVER_SETTINGS.items():
            args += ["-c", f"{key}={value}"]
        log = open(self.root / "postgres.log", "ab")
        self.server = subprocess.Popen(args, user=OS_USER, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = started + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.endpoint.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return time.monotonic() - started
            except psycopg.OperationalError:
                if self.server.poll() is not None:
                    raise RuntimeError(f"postgres exited: {(self.root / 'postgres.log').read_text()[-2000:]}")
                time.sleep(0.02)
        raise RuntimeError(f"postgres not ready in {SERVER_START_TIMEOUT_S} s")

    def create_schema(self) -> None:
        import psycopg

        with psycopg.connect(self.endpoint.dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)

    def start_poller(self) -> None:
        self.poller = subprocess.Popen([sys.executable, "-m", "bench.peers.postgres_timer_table", "poll",
                                        "--dsn", self.endpoint.dsn], cwd=Path(__file__).resolve().parents[2])

    def start(self) -> None:
        self.initdb()
        self.start_server()
        self.create_schema()
        self.start_poller()

    def kill_server(self) -> None:
        """kill -9 of the postmaster (a crash). Its backends hold the shared memory and a new
        postmaster refuses to start until they are gone; they leave within a moment of losing it."""
        backends = children_of(self.server.pid)
        os.kill(self.server.pid, signal.SIGKILL)
        self.server.wait()
        deadline = time.monotonic() + SERVER_STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in backends):
            time.sleep(0.05)

    def restart_after_crash(self) -> float:
        """kill -9 of the postmaster, then start it again at once as a supervisor would (crash
        recovery replays the WAL); seconds until it serves."""
        self.kill_server()
        return self.start_server()

    def stop_poller(self) -> None:
        if self.poller is not None and self.poller.poll() is None:
            self.poller.send_signal(signal.SIGTERM)
            try:
                self.poller.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.poller.kill()
                self.poller.wait()

    def stop(self) -> None:
        self.stop_poller()
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)  # "fast" shutdown: roll back, checkpoint, exit
            try:
                self.server.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        found = {}
        if self.server is not None and self.server.poll() is None:
            found["postgres"] = self.server.pid
            # Each connection is a backend process: their CPU is the server's too.
            for pid in children_of(self.server.pid):
                found[f"postgres/{pid}"] = pid
        if self.poller is not None and self.poller.poll() is None:
            found["poller"] = self.poller.pid
        return found

    def client(self, concurrency: int = 1) -> PostgresTimerTableClient:
        return self.endpoint.open_client(concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["poll"])
    parser.add_argument("--dsn", required=True)
    args = parser.parse_args()
    run_poller(args.dsn)


if __name__ == "__main__":
    main()
