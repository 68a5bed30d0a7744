"""The long-polling consumer, in a process of its own so that its receipt instants are not delayed
by the load generator's event loop. It reads fired timers until it has seen `expected` distinct
txns (of its run: those starting with txn_prefix) or its deadline passes, then sends back (txn, fired_at_ms, received_at_ms) triples."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import time
from typing import Any

# One long poll waits at most this long, so the deadline and a stop are noticed.
LONG_POLL_WAIT_S = 1.0
CONSUME_BATCH = 1000
# A consumer whose parent is done with it is ended by PID after this (the last poll is in flight).
JOIN_TIMEOUT_S = 30.0


async def _consume(endpoint: Any, expected: int, deadline_unix_s: float, txn_prefix: str,
                   ready: Any) -> list[tuple[str, int, float]]:
    client = endpoint.open_client(1)
    received: list[tuple[str, int, float]] = []
    seen: set[str] = set()
    gc.freeze()  # what the start left (modules, the client): see below
    try:
        while len(seen) < expected and time.time() < deadline_unix_s:
            # The first call fixes where the consumer reads from (a cursor at the log's end, a
            # watch from the next revision): the parent starts its load only after it.
            wait = min(LONG_POLL_WAIT_S, max(0.01, deadline_unix_s - time.time())) if ready.is_set() else 0.01
            receipts = await client.consume(CONSUME_BATCH, wait)
            ready.set()
            at_ms = time.time() * 1000
            for receipt in receipts:
                if not receipt.txn.startswith(txn_prefix):  # a fire of an earlier run
                    continue
                received.append((receipt.txn, receipt.fired_at_ms, at_ms))
                seen.add(receipt.txn)
            # The receipts kept are tens of thousands of long-lived objects: left in the collector's
            # generations, each full collection walks them all, and its pause (up to a few hundred
            # ms on a busy machine) would be counted as the lag of the fires received after it, for
            # every system alike. Frozen, a collection walks only what came since.
            gc.freeze()
    finally:
        await client.close()
    return received


def _main(endpoint: Any, expected: int, deadline_unix_s: float, txn_prefix: str, ready: Any, out: Any) -> None:
    try:
        out.send(asyncio.run(_consume(endpoint, expected, deadline_unix_s, txn_prefix, ready)))
    except Exception as exc:  # the parent reports it; a silent child would look like lost timers
        out.send(repr(exc))
    ready.set()  # a consumer that failed before its first call must not hold the parent
    out.close()


class ConsumerProcess:
    """start() before the load, result() after it."""

    def __init__(self, endpoint: Any, expected: int, deadline_unix_s: float, txn_prefix: str = ""):
        context = multiprocessing.get_context("spawn")
        self._ready = context.Event()
        self._receive, send = context.Pipe(duplex=False)
        self._process = context.Process(target=_main, args=(endpoint, expected, deadline_unix_s, txn_prefix, self._ready, send),
                                        daemon=True)
        self._deadline = deadline_unix_s

    def start(self) -> None:
        """Returns once the consumer reads from the log's current end (or JOIN_TIMEOUT_S passed)."""
        self._process.start()
        self._ready.wait(JOIN_TIMEOUT_S)

    @property
    def pid(self) -> int:
        return self._process.pid

    def result(self) -> list[tuple[str, int, float]]:
        wait_s = max(0.0, self._deadline - time.time()) + JOIN_TIMEOUT_S
        if not self._receive.poll(wait_s):
            self._process.kill()
            raise RuntimeError("the consumer process sent nothing before its deadline")
        answer = self._receive.recv()
        self._process.join(JOIN_TIMEOUT_S)
        if isinstance(answer, str):
            raise RuntimeError(f"the consumer process failed: {answer}")
        return answer
