"""Which systems a scenario runs against: ours, then each peer, one at a time (never side by side:
they would share the same two cores)."""

from __future__ import annotations

from typing import Callable, Iterator

from bench.queen_service import QueenCluster, pick_port_runs
from bench.timer_service import TimerService

OURS = "queen-raft"
PEERS = ("etcd", "redis", "postgres")
SYSTEM_NAMES = (OURS, *PEERS)


def make_service(name: str, queen_settings: dict | None = None) -> TimerService:
    if name == OURS:
        return QueenCluster(settings=queen_settings)
    if name == "etcd":
        from bench.peers.etcd_cluster import MEMBERS, EtcdCluster

        return EtcdCluster(pick_port_runs(MEMBERS, 2))
    port = pick_port_runs(1, 1)[0]
    if name == "redis":
        from bench.peers.redis_delay_queue import RedisDelayQueue

        return RedisDelayQueue(port)
    if name == "postgres":
        from bench.peers.postgres_timer_table import PostgresTimerTable

        return PostgresTimerTable(port)
    raise ValueError(f"unknown system {name!r}")


def each_system(names: tuple[str, ...], run: Callable[[TimerService], dict],
                queen_settings: dict | None = None) -> Iterator[tuple[str, dict]]:
    """Starts each system, runs the scenario on it, stops it by PID whatever happened."""
    for name in names:
        if name in PEERS:
            from bench.peers.debian_packages import ensure_installed

            ensure_installed(name)
        service = make_service(name, queen_settings)
        try:
            service.start()  # inside: a start that fails half way still stops what it started
            yield name, run(service)
        finally:
            service.stop()
