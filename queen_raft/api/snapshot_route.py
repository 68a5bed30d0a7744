"""GET /api/v1/admin/snapshot: the tenant's state as the state's own snapshot bytes (backups).

Admin tokens only; the tenant is the token's. The snapshot is taken after a read barrier, so it
holds every write acknowledged before the call began, and under the state's lock, so it is one
consistent state at one applied index. Encoding runs on a worker thread, off the event loop: the
node goes on answering other calls meanwhile (applies of this tenant wait for the encode, which
is the price of a consistent copy without a second copy of the state in memory).

The body is the bytes of TenantState.snapshot() (msgpack + zstd), streamed in chunks; the
headers say what they are: X-Queen-Tenant, X-Queen-Applied-Index (the Raft index the state had
applied), X-Queen-Taken-At (the node's clock, ms since the epoch) and X-Queen-Snapshot-Sha256.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.group_calls import read
from queen_raft.api.serving import serving_of

UNAVAILABLE = "unavailable"
STREAM_CHUNK_BYTES = 1 << 20


def _take_snapshot(group) -> tuple[bytes, int]:
    def snap(state) -> tuple[bytes, int]:
        return state.snapshot(), int(group.status().get("appliedIndex") or 0)
    return group.peek_local(snap)


async def get_snapshot(request: web.Request) -> web.StreamResponse:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.ADMIN)
    await read(serving, principal.tenant, lambda state: None, UNAVAILABLE)  # the barrier
    group = serving.groups[principal.tenant]
    data, applied_index = await asyncio.get_running_loop().run_in_executor(None, _take_snapshot, group)
    response = web.StreamResponse(headers={
        "Content-Type": "application/octet-stream",
        "Content-Length": str(len(data)),
        "X-Queen-Tenant": principal.tenant,
        "X-Queen-Applied-Index": str(applied_index),
        "X-Queen-Taken-At": str(int(time.time() * 1000)),
        "X-Queen-Snapshot-Sha256": hashlib.sha256(data).hexdigest(),
    })
    await response.prepare(request)
    view = memoryview(data)
    for start in range(0, len(data), STREAM_CHUNK_BYTES):
        await response.write(view[start:start + STREAM_CHUNK_BYTES])
    await response.write_eof()
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/admin/snapshot", get_snapshot)
