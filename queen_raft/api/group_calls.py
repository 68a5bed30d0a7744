"""Calls from a route into its tenant's group: propose a command, or read after the barrier.

The only place the API meets the Raft layer, so that GroupUnavailable becomes a 503 with
Retry-After in one way everywhere, and commit time is measured once.
"""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from queen_raft.api.errors import ApiError, retry_after_header
from queen_raft.raft import EntryTooLarge, GroupUnavailable

T = TypeVar("T")


def unavailable(code: str, exc: GroupUnavailable) -> ApiError:
    return ApiError(
        503,
        code,
        f"the tenant's group cannot answer now ({exc.reason}); the outcome may be unknown: retry, writes are idempotent",
        retry_after_header(exc.retry_after_s),
        fields={"reason": exc.reason},
    )


async def propose(serving, tenant: str, command: dict, unavailable_code: str) -> dict:
    group = serving.groups[tenant]
    started = time.perf_counter()
    try:
        result = await group.propose(command)
    except GroupUnavailable as exc:
        serving.metrics.group_unavailable.labels(tenant=tenant, reason=exc.reason).inc()
        raise unavailable(unavailable_code, exc) from None
    except EntryTooLarge as exc:  # refused before proposing: pysyncobj corrupts entries past its cap
        raise ApiError(413, "payload_too_large", f"the call is too large for one log entry: {exc}") from None
    serving.metrics.commit_seconds.observe(time.perf_counter() - started)
    return result


async def read(serving, tenant: str, fn: Callable[[Any], T], unavailable_code: str) -> T:
    try:
        return await serving.groups[tenant].read(fn)
    except GroupUnavailable as exc:
        serving.metrics.group_unavailable.labels(tenant=tenant, reason=exc.reason).inc()
        raise unavailable(unavailable_code, exc) from None
