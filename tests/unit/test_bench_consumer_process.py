"""bench/consumer_process.py: start() returns only once the consumer has fixed where it reads from
(its first consume call), so that no fire of the run lands before its cursor or watch."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from bench.consumer_process import ConsumerProcess

# The fake's first consume call takes this long, as a slow start on a loaded machine does.
SLOW_FIRST_CALL_S = 0.5


@dataclass(frozen=True)
class SlowStartEndpoint:
    marker: str

    def open_client(self, concurrency: int = 1) -> "SlowStartClient":
        return SlowStartClient(Path(self.marker))


class SlowStartClient:
    def __init__(self, marker: Path):
        self.marker = marker

    async def consume(self, max_batch: int, wait_s: float) -> list:
        if not self.marker.exists():
            await asyncio.sleep(SLOW_FIRST_CALL_S)
            self.marker.write_text("cursor fixed")
        await asyncio.sleep(min(wait_s, 0.05))
        return []

    async def close(self) -> None:
        pass


def test_start_returns_after_the_first_consume_call(tmp_path):
    marker = tmp_path / "cursor"
    consumer = ConsumerProcess(SlowStartEndpoint(str(marker)), expected=1, deadline_unix_s=time.time() + 2)
    consumer.start()
    try:
        assert marker.exists()
    finally:
        assert consumer.result() == []


RECEIPTS_PER_CALL = 2000
CALLS_WITH_RECEIPTS = 3


@dataclass(frozen=True)
class ReceiptsEndpoint:
    report: str

    def open_client(self, concurrency: int = 1) -> "ReceiptsClient":
        return ReceiptsClient(Path(self.report))


class ReceiptsClient:
    """Hands out receipts in a few calls, then writes how many objects the collector has frozen."""

    def __init__(self, report: Path):
        self.report = report
        self.calls = 0

    async def consume(self, max_batch: int, wait_s: float) -> list:
        from bench.timer_service import Receipt

        self.calls += 1
        if self.calls <= CALLS_WITH_RECEIPTS:
            first = (self.calls - 1) * RECEIPTS_PER_CALL
            return [Receipt(f"t-{n}", n) for n in range(first, first + RECEIPTS_PER_CALL)]
        if not self.report.exists():
            import gc

            self.report.write_text(str(gc.get_freeze_count()))
        await asyncio.sleep(min(wait_s, 0.05))
        return []

    async def close(self) -> None:
        pass


def test_the_receipts_kept_are_out_of_the_collectors_generations(tmp_path):
    """A full collection walking every receipt kept would pause the consumer, and the pause would be
    counted as fire lag: the consumer freezes what it keeps."""
    report = tmp_path / "frozen"
    received = RECEIPTS_PER_CALL * CALLS_WITH_RECEIPTS
    consumer = ConsumerProcess(ReceiptsEndpoint(str(report)), expected=received + 1, deadline_unix_s=time.time() + 1.5)
    consumer.start()
    assert len(consumer.result()) == received
    assert int(report.read_text()) >= received
