"""The bare-integer trap, which mypy must flag: `delay` takes a string with units or a timedelta."""

from queen_raft.client import Queen


async def main() -> None:
    async with Queen(urls=["http://127.0.0.1:6632"]) as q:
        await q.timer("r").key("k").delay(3600).payload(1).schedule()
