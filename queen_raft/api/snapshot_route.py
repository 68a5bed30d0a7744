"""GET /api/v1/admin/snapshot: the tenant's state as the state's own snapshot bytes (backups).

Admin tokens only; the tenant is the token's. The snapshot is taken after a read barrier, so it
holds every write acknowledged before the call began. Encoding a million timers takes seconds, and
applies run on the Raft tick thread under the state's lock: holding the lock that long would stop
the leader's heartbeats and cost it the leadership. So, as pysyncobj's own snapshots do, the
process forks while it holds the lock (one consistent state at one applied index, for the time of
a fork), and the child encodes its copy-on-write image of the state into an unlinked temporary
file and exits; the parent waits for it on a worker thread, off the event loop, then streams the
file.

The body is the bytes of TenantState.snapshot() (msgpack + zstd), streamed in chunks; the
headers say what they are: X-Queen-Tenant, X-Queen-Applied-Index (the Raft index the state had
applied), X-Queen-Taken-At (the node's clock, ms since the epoch) and X-Queen-Snapshot-Sha256.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time
from typing import IO

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.group_calls import read
from queen_raft.api.serving import serving_of
from queen_raft.raft.forked_writer import prefer_this_process_for_the_oom_killer

UNAVAILABLE = "unavailable"
STREAM_CHUNK_BYTES = 1 << 20

# The 200 answer in the OpenAPI document (api/openapi.py): bytes, described by the headers.
_HEADERS = (("X-Queen-Tenant", {"type": "string"}, "the token's tenant"),
            ("X-Queen-Applied-Index", {"type": "integer", "minimum": 0}, "the Raft index the state had applied"),
            ("X-Queen-Taken-At", {"type": "integer", "minimum": 0}, "the node's clock when taken, ms since the epoch"),
            ("X-Queen-Snapshot-Sha256", {"type": "string"}, "hex sha256 of the body"))
OPENAPI_OK = {
    "description": "TenantState.snapshot() bytes (msgpack + zstd), streamed",
    "headers": {name: {"schema": schema, "description": text} for name, schema, text in _HEADERS},
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


class SnapshotFailed(Exception):
    """The forked encoder did not finish; the node goes on serving."""


def _encode_in_child(state, output) -> None:
    """Runs in the forked child: encode, write, leave without running the parent's exit hooks."""
    code = 1
    try:
        prefer_this_process_for_the_oom_killer()
        if hasattr(state, "write_snapshot"):
            state.write_snapshot(output)  # streamed: the encoded state is never whole in memory
        else:
            output.write(state.snapshot())
        output.flush()
        code = 0
    finally:
        os._exit(code)


def _take_snapshot(group) -> tuple[IO[bytes], int]:
    """(an unlinked file holding the snapshot bytes, the applied index they are at)."""
    output = tempfile.TemporaryFile(prefix="queen-tenant-snapshot-")

    def fork_under_lock(state) -> tuple[int, int]:
        applied_index = int(group.status().get("appliedIndex") or 0)
        pid = os.fork()
        if pid == 0:
            _encode_in_child(state, output)
        return pid, applied_index

    try:
        pid, applied_index = group.peek_local(fork_under_lock)
        _, status = os.waitpid(pid, 0)
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            raise SnapshotFailed(f"the snapshot encoder (pid {pid}) ended with wait status {status}")
        output.seek(0)
        return output, applied_index
    except BaseException:
        output.close()
        raise


def _digest_and_size(file: IO[bytes]) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := file.read(STREAM_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    file.seek(0)
    return digest.hexdigest(), size


async def get_snapshot(request: web.Request) -> web.StreamResponse:
    serving = serving_of(request)
    principal = require(serving.config, request, Access.ADMIN)
    await read(serving, principal.tenant, lambda state: None, UNAVAILABLE)  # the barrier
    group = serving.groups[principal.tenant]
    loop = asyncio.get_running_loop()
    output, applied_index = await loop.run_in_executor(None, _take_snapshot, group)
    with output:
        digest, size = await loop.run_in_executor(None, _digest_and_size, output)
        response = web.StreamResponse(headers={
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size),
            "X-Queen-Tenant": principal.tenant,
            "X-Queen-Applied-Index": str(applied_index),
            "X-Queen-Taken-At": str(int(time.time() * 1000)),
            "X-Queen-Snapshot-Sha256": digest,
        })
        await response.prepare(request)
        while chunk := await loop.run_in_executor(None, output.read, STREAM_CHUNK_BYTES):
            await response.write(chunk)
        await response.write_eof()
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/admin/snapshot", get_snapshot)
