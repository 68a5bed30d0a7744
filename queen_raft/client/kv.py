"""`q.kv(ns)`: one namespace of the tenant's replicated KV store (versions, expiry on the group clock)."""

from __future__ import annotations

from typing import Any

from queen_raft.client.durations import Duration, duration_seconds
from queen_raft.client.errors import OutcomeUnknown, PreconditionFailed
from queen_raft.client.results import KvEntry
from queen_raft.client.transport import Transport, path_segment


def expiry_fields(ttl: Duration | None) -> dict[str, Any]:
    """`ttlSeconds` from a duration; no ttl is `forever` (and clears an earlier expiry on put)."""
    if ttl is None:
        return {"forever": True}
    return {"ttlSeconds": duration_seconds(ttl)}


def kv_op(op: str, ns: str, key: str, **fields: Any) -> dict:
    """One op of `POST /api/v1/kv` (and of a transaction's `kv`)."""
    return {"op": op, "ns": ns, "key": key, **fields}


class KvNamespace:
    def __init__(self, transport: Transport, ns: str):
        self._transport = transport
        self.ns = ns

    def _path(self, key: str) -> str:
        return f"/api/v1/kv/{path_segment(self.ns)}/{path_segment(key, keep_slashes=True)}"

    async def get(self, key: str) -> KvEntry:
        """`found: false` for a key never written, deleted or expired."""
        answer = await self._transport.request("GET", self._path(key))
        return KvEntry.from_wire(answer.body, self.ns, key)

    async def put(self, key: str, value: Any, ttl: Duration | None = None) -> KvEntry:
        """Any JSON value; `ttl` like "7d" (whole seconds), None for no expiry."""
        answer = await self._transport.request("PUT", self._path(key), json_body={"value": value, **expiry_fields(ttl)})
        return KvEntry.from_wire(answer.body, self.ns, key)

    async def delete(self, key: str) -> KvEntry:
        """`found` says whether a live key was deleted. `found: false` answered to a retry whose
        earlier attempt may have been applied is OutcomeUnknown: that attempt may have deleted it
        (the key is absent either way)."""
        answer = await self._transport.request("DELETE", self._path(key))
        entry = KvEntry.from_wire(answer.body, self.ns, key)
        if not entry.found and answer.maybe_applied_before:
            raise OutcomeUnknown(answer.status, "outcome_unknown", f"the delete of {key!r} was retried and found no "
                                 "live key: the first try may have deleted it")
        return entry

    async def put_if_absent(self, key: str, value: Any, ttl: Duration | None = None) -> KvEntry:
        """PreconditionFailed (409) when the key is live. A retry after a lost answer may find the
        key its own first try wrote: that is reported as OutcomeUnknown."""
        try:
            return await self._single(kv_op("putIfAbsent", self.ns, key, value=value, **expiry_fields(ttl)))
        except PreconditionFailed as exc:
            if exc.maybe_applied_before:
                raise OutcomeUnknown(exc.status, exc.code, f"putIfAbsent of {key!r} was retried and found the key live: "
                                     "the first try may have written it", body=exc.body) from exc
            raise

    async def incr(self, key: str, by: int = 1, ttl: Duration | None = None) -> KvEntry:
        """Not idempotent: a 503 or a lost answer is raised (OutcomeUnknown / Unavailable), never retried.
        No ttl keeps the key's expiry as it is."""
        fields: dict[str, Any] = {"by": by}
        if ttl is not None:
            fields["ttlSeconds"] = duration_seconds(ttl)
        return await self._single(kv_op("incr", self.ns, key, **fields), idempotent=False)

    async def check(self, key: str, expected_version: int | None) -> KvEntry:
        """Asserts the key's version (None: that it is absent); PreconditionFailed when it is not."""
        return await self._single(kv_op("check", self.ns, key, expectedVersion=expected_version))

    async def batch(self, ops: list[dict], idempotent: bool = True) -> list[KvEntry]:
        """Several ops (see `kv_op`) in one entry, all or nothing."""
        answer = await self._transport.request("POST", "/api/v1/kv", json_body={"ops": ops}, idempotent=idempotent)
        return [KvEntry.from_wire(row, op["ns"], op["key"]) for op, row in zip(ops, answer.body["results"])]

    async def _single(self, op: dict, idempotent: bool = True) -> KvEntry:
        return (await self.batch([op], idempotent=idempotent))[0]
