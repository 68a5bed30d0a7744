"""What the routes need from the node process they run in: its config, its groups, its meters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from aiohttp import web

from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.encryption import PayloadCipher
from queen_raft.api.metrics import ApiMetrics
from queen_raft.api.pop_turns import PopTurns
from queen_raft.api.rate_limit import TenantRateLimiter
from queen_raft.config import ClusterConfig
from queen_raft.raft.group_api import GroupApi


@dataclass
class ServingNode:
    node_id: str
    config: ClusterConfig
    # tenant -> its group on this node (what a route may call on it: GroupApi)
    groups: Mapping[str, GroupApi]
    # tenant -> the signal its group's applies raise (long polls wait on it)
    apply_signals: Mapping[str, ApplySignal]
    metrics: ApiMetrics
    timer_rate: TenantRateLimiter
    # Set when QUEEN_ENCRYPTION_KEY is: encrypts for queues with encryptionEnabled, decrypts for consumers.
    cipher: PayloadCipher | None = None
    pop_turns: PopTurns = field(default_factory=PopTurns)

    @property
    def settings(self):
        return self.config.settings


SERVING_KEY = web.AppKey("serving", ServingNode)


def serving_of(request: web.Request) -> ServingNode:
    return request.app[SERVING_KEY]
