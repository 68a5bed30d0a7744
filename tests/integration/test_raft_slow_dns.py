"""Peers known by name, a peer down and a DNS that answers slowly (or times out): the leader keeps
leading. A name is looked up when a peer is dialled, and pysyncobj looked it up on the group's tick
thread, which then stood still for the whole lookup (a resolver's timeout is seconds): no
heartbeats, so the other member called an election, and the same happened to each new leader
while it redialled the down peer. Now names are looked up off the tick thread (peer_resolver.py);
a dial waits for the answer.

Three TenantGroups in this process on real sockets; each dials its peers as `localhost:<port>` and
the lookups of `localhost` are made to take two seconds.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from inprocess_groups import leader_of, three_members, wait_until
from pysyncobj.dns_resolver import globalDnsResolver

from queen_raft.raft import RaftSettings
from queen_raft.raft.peer_resolver import PEER_RESOLVER

pytestmark = pytest.mark.integration

SETTINGS = RaftSettings()
LOOKUP_S = 2.0
WATCH_S = 6.0


async def test_a_slow_dns_while_a_peer_is_down_does_not_stall_the_leader(tmp_path, monkeypatch):
    async with three_members(tmp_path, SETTINGS) as (addrs, live, start, stop):
        by_name = {addr: "localhost:" + addr.rsplit(":", 1)[1] for addr in addrs}
        for addr in addrs:
            start(addr, dial_map={peer: by_name[peer] for peer in addrs if peer != addr})
        await wait_until(lambda: leader_of(list(live.values())) is not None, "a leader")
        leader = leader_of(list(live.values()))
        await leader.propose({"op": "set", "key": "before", "value": 0})
        down = next(group for group in live.values() if group is not leader)
        await stop(down.self_addr)

        real_getaddrinfo = socket.getaddrinfo
        slow_lookups = []

        def slow_getaddrinfo(host, *args, **kwargs):
            if host == "localhost":
                slow_lookups.append(host)
                time.sleep(LOOKUP_S)
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", slow_getaddrinfo)
        # Every dial looks the name up again, as once the cached answer expires.
        monkeypatch.setattr(PEER_RESOLVER, "cache_s", 0.0)
        resolver = globalDnsResolver()  # pysyncobj's, for any lookup left to it
        resolver.setTimeouts(0.0, 0.0)
        try:
            term = leader.status()["term"]
            watch_until = time.monotonic() + WATCH_S
            slowest_s = 0.0
            while time.monotonic() < watch_until:
                started = time.monotonic()
                await leader.propose({"op": "set", "key": "k", "value": 1})
                slowest_s = max(slowest_s, time.monotonic() - started)
                await asyncio.sleep(0.05)
            assert leader.is_leader and leader.status()["term"] == term, "the leader lost its place"
            assert slowest_s < LOOKUP_S / 2, f"a write waited {slowest_s:.2f} s behind a lookup"
            assert len(slow_lookups) >= 2, "the down peer's name was never looked up again"
        finally:
            resolver.setTimeouts(600.0, 30.0)  # pysyncobj's own
