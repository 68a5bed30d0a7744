"""Peer names looked up off the tick thread.

A peer given by name (its address, or its dial map target) is looked up when it is dialled.
pysyncobj does that on the group's tick thread (DnsCachingResolver: again after 600 s, or 30 s after
a failure), and getaddrinfo blocks for as long as the resolver takes: seconds when a DNS server does
not answer (its timeout, times its attempts). The tick thread then sends no heartbeat, applies
nothing and answers no vote meanwhile; a leader redialling a peer that is down lost its place at
each lookup (tests/integration/test_raft_slow_dns.py).

Here a dial takes what is known of the name at once: its address from the last lookup (kept while
a new one runs, and after a failed one, as pysyncobj keeps it), or None for a name never resolved,
which skips this dial (the transport dials again after connection_retry_s). A lookup that is due
runs on a thread of its own, one per name at a time. Numeric addresses are never looked up.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import socket
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# As pysyncobj's DnsCachingResolver: an answer is kept this long, a failure this long.
CACHE_S = 600.0
FAILURE_CACHE_S = 30.0


def lookup(host: str) -> list[str]:
    """The name's addresses, IPv4 first preferred (as pysyncobj); [] when it does not resolve."""
    try:
        found = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
        log.warning("cannot resolve the peer name %s: %s", host, exc)
        return []
    ipv4 = sorted({entry[4][0] for entry in found if entry[0] == socket.AF_INET})
    return ipv4 or sorted({entry[4][0] for entry in found})


class PeerResolver:
    def __init__(self, resolve: Callable[[str], list[str]] = lookup, clock: Callable[[], float] = time.monotonic,
                 cache_s: float = CACHE_S, failure_cache_s: float = FAILURE_CACHE_S) -> None:
        self._resolve = resolve
        self._clock = clock
        self.cache_s = cache_s
        self.failure_cache_s = failure_cache_s
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, list[str]]] = {}  # name -> (when looked up, addresses)
        self._looking_up: set[str] = set()

    def address_of(self, host: str) -> str | None:
        """An address to dial for `host` now, without waiting for a lookup; None when none is known yet."""
        try:
            ipaddress.ip_address(host)
            return host
        except ValueError:
            pass
        now = self._clock()
        with self._lock:
            looked_up_at, addresses = self._known.get(host, (None, []))
            due = looked_up_at is None or now - looked_up_at > (self.cache_s if addresses else self.failure_cache_s)
            if due and host not in self._looking_up:
                self._looking_up.add(host)
                threading.Thread(target=self._look_up, args=(host,), name=f"resolve {host}", daemon=True).start()
        return random.choice(addresses) if addresses else None

    def _look_up(self, host: str) -> None:
        try:
            addresses = self._resolve(host)
        finally:
            with self._lock:
                self._looking_up.discard(host)
        with self._lock:
            kept = addresses or self._known.get(host, (None, []))[1]  # a failure keeps the last answer
            self._known[host] = (self._clock(), kept)


PEER_RESOLVER = PeerResolver()
