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
