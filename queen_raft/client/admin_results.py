"""Typed answers of the operator calls: a tenant's usage and a queue's options in force. Each keeps
the wire dict in `raw`, like the answers of results.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Usage:
    """GET /api/v1/usage (admin). `fired`: fires by result (appended, duplicate, failed, dlq)."""

    tenant: str
    billed_messages: int
    pushed_messages: int
    pending_timers: int
    fired: dict[str, int]
    scheduling_paused: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> "Usage":
        return cls(tenant=wire.get("tenant", ""), billed_messages=int(wire.get("billedMessages") or 0),
                   pushed_messages=int(wire.get("pushedMessages") or 0),
                   pending_timers=int(wire.get("pendingTimers") or 0), fired=dict(wire.get("fired") or {}),
                   scheduling_paused=bool(wire.get("schedulingPaused")), raw=wire)


@dataclass(frozen=True)
class QueueOptions:
    """POST /api/v1/configure: the options in force after the change (wire names: leaseTime, ...)."""

    queue: str
    options: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, wire: dict[str, Any], queue: str = "") -> "QueueOptions":
        return cls(queue=wire.get("queue", queue), options=dict(wire.get("options") or {}), raw=wire)
