"""One node process: every tenant's Raft group and the HTTP API, until SIGTERM or SIGINT.

Groups are constructed on the main thread before the event loop runs: pysyncobj's tick thread
dies with the thread that constructed it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import ssl
import sys
import time
from dataclasses import dataclass

from aiohttp import web

from queen_raft.api.app import CLIENT_ERRORS_KEY, CONNECTIONS_KEY, create_app
from queen_raft.api.client_errors import CountResourceErrors, loop_exception_handler
from queen_raft.api.connections import LimitedSite, fit_connection_limit
from queen_raft.api.apply_signal import ApplySignal
from queen_raft.api.encryption import PayloadCipher
from queen_raft.api.metrics import ApiMetrics
from queen_raft.api.rate_limit import TenantRateLimiter
from queen_raft.api.serving import ServingNode
from queen_raft.config import ClusterConfig, NodeConfig
from queen_raft.http_tls import refuse_to_start_without_tls
from queen_raft.peer_password import resolve_raft_password
from queen_raft.raft import GroupUnavailable, RaftSettings, TenantGroup
from queen_raft.raft.damaged import DamagedDataError, on_runtime_damage, remove_runtime_damage_listener
from queen_raft.raft.damaged import exit_code_for as damaged_data_exit_code
from queen_raft.raft.startup_phases import log_phase, log_process_started
from queen_raft.state import TenantState
from queen_raft.young_collections import YoungCollections

log = logging.getLogger("queen_raft.node")

# Open long polls are answered (204) or dropped within this after SIGTERM; aiohttp's default of
# 60 s would make a clean stop wait for every parked consumer.
SHUTDOWN_GRACE_S = 2.0
# A node without QUEEN_ENCRYPTION_KEY learns whether a tenant has an encrypting queue once its
# groups have replayed: a read barrier (every committed entry applied here) needs a leader, which
# a node whose majority is down cannot have. It tries this long, then serves anyway (an encrypting
# queue is then answered 503 encryption_unavailable by this node) and says so in its log.
ENCRYPTION_CHECK_TIMEOUT_S = 60.0
ENCRYPTION_CHECK_RETRY_S = 0.25
# Garbage collection of a node process. gen0 at 10,000 instead of CPython's 700: a request's
# objects die with it, but 32 requests in flight hold a few hundred containers each, so at 700
# young collections ran every few dozen calls and walked objects about to be freed anyway; at
# 10,000 they run when something is really accumulating (cyclic garbage counts towards it, so it
# is still collected within 10,000 objects). gen1 keeps its default, and full (gen2) collections
# come only after 1000 gen1 collections instead of 10. With 10, the rule that matters is
# CPython's other one, a full collection whenever the long-lived heap has grown by a quarter, which
# a node's growing state (every pending timer is long-lived) triggers again and again, each time
# holding the GIL for tens of milliseconds while finding almost nothing cyclic: the p99 of every
# call in flight (docs/performance.md). Young collections also run on a clock
# (young_collections.py): the count above says nothing of the containers' sizes.
GC_THRESHOLDS = (10_000, 10, 1000)
# How long a thread waiting for the GIL lets the holder run before asking it to let go (CPython's
# default is 5 ms). The journal flush releases the GIL (fdatasync, raft/journal.py), so the tick
# thread takes it back from the busy loop thread after every flush, and every commit waits on the
# tick thread. With the default 5 ms the releasing flush cost more than it saved; 0.5 ms gives
# the GIL back soon enough that it pays (figures in queen_raft/raft/README.md, "GIL and the flush").
GIL_SWITCH_INTERVAL_S = 0.0005
# sysexits' EX_CONFIG: the operator must fix the node's environment, a restart alone will not do.
EXIT_MISSING_ENCRYPTION_KEY = 78


class MissingEncryptionKey(RuntimeError):
    """A tenant has a queue with encryptionEnabled and this node has no QUEEN_ENCRYPTION_KEY."""


def encrypting_queue_names(state: TenantState) -> list[str]:
    return sorted(name for name in state.broker.queues if (state.queue_options(name) or {}).get("encryptionEnabled"))


@dataclass
class NodeProcess:
    config: ClusterConfig
    node: NodeConfig
    groups: dict[str, TenantGroup]
    serving: ServingNode
    missing_key: MissingEncryptionKey | None = None
    damaged: DamagedDataError | None = None
    ssl_context: ssl.SSLContext | None = None  # HTTPS when set (http_tls.py)


def _destroy_groups(groups: dict[str, TenantGroup]) -> None:
    for group in groups.values():
        group.destroy()


def build_node(config: ClusterConfig, node_id: str) -> NodeProcess:
    """Constructs every tenant group (main thread) and the serving state of the API."""
    node = config.node(node_id)
    settings = RaftSettings.from_settings(resolve_raft_password(config).settings)
    metrics_groups: dict[str, TenantGroup] = {}
    metrics = ApiMetrics(groups_source=lambda: metrics_groups,
                         quotas={tenant.name: config.timers_max_pending(tenant.name) for tenant in config.tenants})
    groups: dict[str, TenantGroup] = {}
    signals: dict[str, ApplySignal] = {}
    for tenant in config.tenants:
        apply_signal = ApplySignal()
        group = _start_group(groups, TenantGroup,
            tenant=tenant.name,
            self_addr=node.raft_addr(tenant.index),
            peer_addrs=[peer.raft_addr(tenant.index) for peer in config.nodes if peer.id != node.id],
            data_dir=str(config.group_data_dir(node.id, tenant.name)),
            settings=settings,
            bind_host=node.host,
            # [nodes.dial]: peers reached through other addresses (the fault harness's link proxies).
            dial_map=node.dial_map(tenant.index),
        )
        # Long polls wake on applies (entries proposed by any node, the leader's ticks included).
        group.on_applied = apply_signal.notify_threadsafe
        group.on_leadership_change = _log_leadership_change
        group.on_tick_result = _tick_result_observer(metrics, tenant.name)
        groups[tenant.name] = group
        signals[tenant.name] = apply_signal
    metrics_groups.update(groups)
    for tenant_name, group in groups.items():
        try:
            group.wait_bound()  # also waits for the group's snapshot load
        except DamagedDataError:  # the snapshot could not be loaded (snapshot_guard.py)
            _destroy_groups(groups)
            raise
        except Exception as exc:  # pysyncobj's BindError: say which port, then stop what started
            _destroy_groups(groups)
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


def _start_group(started: dict[str, TenantGroup], group_class, **arguments) -> TenantGroup:
    """A new group; when it cannot start (damaged data on disk), the groups started before it stop
    first, so the node exits at once with its error."""
    try:
        return group_class(**arguments)
    except DamagedDataError:
        for group in started.values():
            group.destroy()
        raise


def _log_leadership_change(tenant: str, role: str, leader: str | None, term: int) -> None:
    log.info("leadership tenant=%s role=%s leader=%s term=%s", tenant, role, leader or "none", term)


def _tick_result_observer(metrics: ApiMetrics, tenant: str):
    def observe(result: dict, lags_ms: list) -> None:
        metrics.observe_tick_result(tenant, {"lagsMs": lags_ms, "firedByQueue": result.get("firedByQueue")})

    return observe


async def find_encrypting_queues(process: NodeProcess, timeout_s: float = ENCRYPTION_CHECK_TIMEOUT_S) -> dict[str, list[str]]:
    """tenant -> its encrypting queues, read after each group's barrier (the replayed journal and
    snapshot applied). A group that finds no leader in time is reported as unknown in the log."""
    found: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout_s
    for tenant, group in process.groups.items():
        # Restored from the snapshot already: a hit here needs no leader.
        names = group.peek_local(encrypting_queue_names)
        while not names:
            try:
                names = await group.read(encrypting_queue_names)
                break
            except GroupUnavailable:
                if time.monotonic() >= deadline:
                    log.warning("node %s: tenant %s has no leader after %.0f s; cannot tell whether it has "
                                "encrypting queues (this node has no QUEEN_ENCRYPTION_KEY)", process.node.id, tenant,
                                timeout_s)
                    break
                await asyncio.sleep(ENCRYPTION_CHECK_RETRY_S)
        if names:
            found[tenant] = names
    return found


async def refuse_to_run_without_key(process: NodeProcess, stop: asyncio.Event) -> None:
    """Stops the node when it lacks the key a tenant's queues need: it could neither
    encrypt what is pushed or scheduled to them nor decrypt what consumers pop."""
    if process.serving.cipher is not None:
        return
    found = await find_encrypting_queues(process)
    if found:
        listing = "; ".join(f"tenant {t}: {', '.join(q)}" for t, q in sorted(found.items()))
        process.missing_key = MissingEncryptionKey(
            f"node {process.node.id} has no QUEEN_ENCRYPTION_KEY but queues encrypt at rest ({listing}); "
            "set QUEEN_ENCRYPTION_KEY (64 hex chars, the cluster's key) and start it again")
        log.critical("%s", process.missing_key)
        stop.set()


async def serve(process: NodeProcess) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    for tenant, group in process.groups.items():
        process.serving.apply_signals[tenant].bind(loop)
        group.start_tick_loop(loop)
    app = create_app(process.serving)
    guard_against_descriptor_floods(app, loop, len(process.groups))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    site = LimitedSite(runner, app[CONNECTIONS_KEY], host=process.node.host, port=process.node.http_port,
                       ssl_context=process.ssl_context)
    await site.start()
    log.info("node %s serving %s (tenants: %s)", process.node.id, process.node.http_url, ", ".join(process.groups))
    key_check = asyncio.create_task(refuse_to_run_without_key(process, stop))
    young_collections = YoungCollections()
    young_collections.start(loop)

    def stop_on_damage(error: DamagedDataError) -> None:  # any thread: an entry read back failed its check
        process.damaged = process.damaged or error
        loop.call_soon_threadsafe(stop.set)

    on_runtime_damage(stop_on_damage)
    try:
        await stop.wait()
        log.info("node %s stopping", process.node.id)
    finally:
        remove_runtime_damage_listener(stop_on_damage)
        key_check.cancel()
        young_collections.stop()
        await runner.cleanup()
        app[CLIENT_ERRORS_KEY].flush()  # the counts of the last interval
        for group in process.groups.values():
            await group.stop()


def guard_against_descriptor_floods(app: web.Application, loop: asyncio.AbstractEventLoop, tenants: int) -> None:
    """The HTTP connection bound fitted to the open-file limit, and accept and tick errors for
    want of descriptors counted in the log instead of a traceback each (api/client_errors.py)."""
    connections = app[CONNECTIONS_KEY]
    connections.max_connections = fit_connection_limit(connections.max_connections, tenants)
    loop.set_exception_handler(loop_exception_handler(app[CLIENT_ERRORS_KEY]))
    logging.getLogger("pysyncobj.syncobj").addFilter(CountResourceErrors(app[CLIENT_ERRORS_KEY]))


def configure_gc() -> None:
    """After startup: freeze what exists (modules, config, what the groups restored from disk so
    far) so that no later collection walks it again, and apply GC_THRESHOLDS. No collection first:
    at a million restored timers it would hold the GIL ~1 s before serving, to free the startup's
    cycles, a bounded few that freezing keeps instead."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def configure_gil_switch_interval() -> None:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def run_node(config: ClusterConfig, node_id: str) -> None:
    """Serves on the stdlib asyncio loop, not uvloop: uvloop made single-op schedules no faster
    (docs/performance.md), and its clock and timers have 1 ms resolution and a cached "now", which
    the tick loop's minimum gap between ticks is measured with, and its socket writes hold the GIL."""
    ssl_context = refuse_to_start_without_tls(config)
    log_process_started(node_id)
    started = time.monotonic()
    try:
        process = build_node(config, node_id)
        log_phase("groups_loaded", started, "journals, snapshots and replays of every group")
        process.ssl_context = ssl_context
    except DamagedDataError as exc:
        log.critical("node %s refuses to start: %s", node_id, exc)
        raise SystemExit(damaged_data_exit_code(exc)) from None
    configure_gc()
    configure_gil_switch_interval()
    try:
        asyncio.run(serve(process))
    finally:
        for group in process.groups.values():
            group.destroy()
        log.info("node %s stopped", process.node.id)
    if process.damaged is not None:
        log.critical("node %s stopped: %s", node_id, process.damaged)
        raise SystemExit(damaged_data_exit_code(process.damaged))
    if process.missing_key is not None:
        raise SystemExit(EXIT_MISSING_ENCRYPTION_KEY)
