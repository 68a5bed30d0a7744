"""One node process: every tenant's Raft group and the HTTP API, until SIGTERM or SIGINT.

Groups are constructed on the main thread before the event loop runs: pysyncobj's tick thread
dies with the thread that constructed it (DESIGN.md).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from aiohttp import web

from queen_raft.api.app import create_app
from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.encryption import PayloadCipher
from queen_raft.api.metrics import ApiMetrics
from queen_raft.api.rate_limit import TenantRateLimiter
from queen_raft.api.serving import ServingNode
from queen_raft.config import ClusterConfig, NodeConfig, Settings
from queen_raft.raft import RaftSettings, TenantGroup
from queen_raft.state import TenantState

log = logging.getLogger("queen_raft.node")

# Open long polls are answered (204) or dropped within this after SIGTERM; aiohttp's default of
# 60 s would make a clean stop wait for every parked consumer.
SHUTDOWN_GRACE_S = 2.0


def raft_settings(settings: Settings) -> RaftSettings:
    return RaftSettings(
        commit_timeout_ms=settings.commit_timeout_ms,
        tick_ms=settings.timer_tick_ms,
        min_gap_ms=settings.timer_min_gap_ms,
        fire_batch=settings.timer_fire_batch,
        fire_max_bytes=settings.timer_fire_max_bytes,
        fsync=settings.fsync,
        election_min_s=settings.election_min_s,
        election_max_s=settings.election_max_s,
        append_entries_period_s=settings.append_entries_period_s,
        leader_fallback_timeout_s=settings.leader_fallback_timeout_s,
        connection_retry_s=settings.connection_retry_s,
        max_in_flight=settings.max_in_flight,
        log_compaction_min_entries=settings.log_compaction_min_entries,
        password=settings.raft_password,
    )


def signalling_state_class(signal_: ApplySignal) -> type[TenantState]:
    """A TenantState that raises the tenant's apply signal after each entry, so long polls wake
    on applies (entries proposed by any node, the leader's ticks included) instead of polling."""

    class SignallingTenantState(TenantState):
        def apply(self, command: dict) -> dict:
            try:
                return super().apply(command)
            finally:
                signal_.notify_threadsafe()

    return SignallingTenantState


@dataclass
class NodeProcess:
    config: ClusterConfig
    node: NodeConfig
    groups: dict[str, TenantGroup]
    serving: ServingNode


def build_node(config: ClusterConfig, node_id: str) -> NodeProcess:
    """Constructs every tenant group (main thread) and the serving state of the API."""
    node = config.node(node_id)
    settings = raft_settings(config.settings)
    metrics_groups: dict[str, TenantGroup] = {}
    metrics = ApiMetrics(groups_source=lambda: metrics_groups)
    groups: dict[str, TenantGroup] = {}
    signals: dict[str, ApplySignal] = {}
    for tenant in config.tenants:
        apply_signal = ApplySignal()
        state_class = signalling_state_class(apply_signal)
        group = TenantGroup(
            tenant=tenant.name,
            self_addr=node.raft_addr(tenant.index),
            peer_addrs=[peer.raft_addr(tenant.index) for peer in config.nodes if peer.id != node.id],
            data_dir=str(config.group_data_dir(node.id, tenant.name)),
            settings=settings,
            state_factory=state_class,
            state_restore=state_class.restore,
            bind_host=node.host,
        )
        group.on_leadership_change = _log_leadership_change
        group.on_tick_result = _tick_result_observer(metrics, tenant.name)
        groups[tenant.name] = group
        signals[tenant.name] = apply_signal
    metrics_groups.update(groups)
    for tenant_name, group in groups.items():
        try:
            group.wait_bound()
        except Exception as exc:  # pysyncobj's BindError: say which port, then stop what started
            for started in groups.values():
                started.destroy()
            raise RuntimeError(f"node {node.id}: tenant {tenant_name!r} cannot bind its Raft port {group.self_addr}: {exc}") from None
    serving = ServingNode(
        node_id=node.id,
        config=config,
        groups=groups,
        apply_signals=signals,
        metrics=metrics,
        timer_rate=TenantRateLimiter(config.settings.timers_rate, config.settings.timers_rate_burst),
        cipher=PayloadCipher(config.settings.encryption_key) if config.settings.encryption_key else None,
    )
    return NodeProcess(config=config, node=node, groups=groups, serving=serving)


def _log_leadership_change(tenant: str, role: str, leader: str | None, term: int) -> None:
    log.info("leadership tenant=%s role=%s leader=%s term=%s", tenant, role, leader or "none", term)


def _tick_result_observer(metrics: ApiMetrics, tenant: str):
    def observe(result: dict, lags_ms: list) -> None:
        metrics.observe_tick_result(tenant, {"lagsMs": lags_ms})

    return observe


async def serve(process: NodeProcess) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    for tenant, group in process.groups.items():
        process.serving.apply_signals[tenant].bind(loop)
        group.start_tick_loop(loop)
    app = create_app(process.serving)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    site = web.TCPSite(runner, host=process.node.host, port=process.node.http_port)
    await site.start()
    log.info("node %s serving http://%s:%s (tenants: %s)", process.node.id, process.node.host,
             process.node.http_port, ", ".join(process.groups))
    try:
        await stop.wait()
        log.info("node %s stopping", process.node.id)
    finally:
        await runner.cleanup()
        for group in process.groups.values():
            await group.stop()


def run_node(config: ClusterConfig, node_id: str) -> None:
    process = build_node(config, node_id)
    try:
        asyncio.run(serve(process))
    finally:
        for group in process.groups.values():
            group.destroy()
        log.info("node %s stopped", process.node.id)
