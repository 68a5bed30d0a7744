"""Per-link TCP proxies: partitions between node processes without root.

Each node is told to dial each peer's Raft address through a proxy of its own (the Raft layer's
dial map), so every directed link dialer -> target has one proxy. A pysyncobj pair uses a single TCP
connection dialed by one side, which carries both directions; so each proxy judges its two byte
streams separately: the stream from the dialer to the target, and the stream back.

A cut is *silent*: the proxy keeps both sockets open and reads and discards what arrives, so the
sender sees a healthy connection and learns of the partition only by its own timeouts, as with an
iptables DROP. (Closing the sockets would give fast, reset-style failures that hide timeout bugs.)

A stream that lost bytes has lost the framing of the messages inside it, which no real TCP
connection ever does (the kernel retransmits or the connection dies). So at heal the proxy closes
every connection that discarded something, and the nodes redial: that is what a long partition does
to a real connection too. Connections that lost nothing stay up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field

# Big enough to move a full 8 MiB Raft entry in few reads, small enough to bound memory per link.
READ_CHUNK_BYTES = 256 * 1024
# A proxy that cannot reach its target (the target is down) closes the dialer's socket after this,
# which is what a refused connection looks like to the dialer.
TARGET_CONNECT_TIMEOUT_S = 2.0
# Control calls into the proxy thread return within this or the harness reports a stuck proxy.
CONTROL_TIMEOUT_S = 10.0

Link = tuple[str, str]  # (source node, destination node): messages from source to destination


@dataclass
class _Stream:
    """One direction of one proxied connection."""

    source: str
    destination: str
    writer: asyncio.StreamWriter
    discarded_bytes: int = 0


@dataclass(eq=False)  # identity, so connections can live in a set
class _Connection:
    upstream: _Stream  # dialer -> target
    downstream: _Stream  # target -> dialer
    tasks: list[asyncio.Task] = field(default_factory=list)

    @property
    def tainted(self) -> bool:
        return self.upstream.discarded_bytes > 0 or self.downstream.discarded_bytes > 0

    def close(self) -> None:
        for stream in (self.upstream, self.downstream):
            if not stream.writer.is_closing():
                stream.writer.close()
        for task in self.tasks:
            task.cancel()


class LinkProxy:
    """Listens for `dialer`, forwards to `target_host:target_port`, drops what the cut set says."""

    def __init__(self, network: "LinkNetwork", dialer: str, target: str, target_host: str, target_port: int) -> None:
        self.network = network
        self.dialer = dialer
        self.target = target
        self.target_host = target_host
        self.target_port = target_port
        self.listen_port = 0
        self.connections: set[_Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for connection in list(self.connections):
            connection.close()
        self.connections.clear()

    async def _accept(self, dialer_reader: asyncio.StreamReader, dialer_writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.wait_for(
                asyncio.open_connection(self.target_host, self.target_port), TARGET_CONNECT_TIMEOUT_S
            )
        except (OSError, asyncio.TimeoutError):
            dialer_writer.close()
            return
        connection = _Connection(
            upstream=_Stream(self.dialer, self.target, target_writer),
            downstream=_Stream(self.target, self.dialer, dialer_writer),
        )
        self.connections.add(connection)
        connection.tasks = [
            asyncio.create_task(self._pump(dialer_reader, connection.upstream, connection)),
            asyncio.create_task(self._pump(target_reader, connection.downstream, connection)),
        ]

    async def _pump(self, reader: asyncio.StreamReader, stream: _Stream, connection: _Connection) -> None:
        try:
            while True:
                chunk = await reader.read(READ_CHUNK_BYTES)
                if not chunk:
                    break
                if self.network.is_cut(stream.source, stream.destination):
                    stream.discarded_bytes += len(chunk)
                    continue
                stream.writer.write(chunk)
                await stream.writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.connections.discard(connection)
            connection.close()


class LinkNetwork:
    """All proxies of a cluster, on an event loop of their own.

    The proxies run on a dedicated thread so that a busy client loop or checker in the harness can
    never delay Raft heartbeats and cause elections the nemesis did not ask for.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._cuts: set[Link] = set()
        self._lock = threading.Lock()
        # One proxy per (dialer, target, target port): a link carries one proxy per tenant group,
        # and a cut of the link (dialer, target) silences all of them.
        self._proxies: dict[tuple[str, str, int], LinkProxy] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="link-proxies", daemon=True)
        self._thread.start()

    def _call(self, coroutine) -> object:
        future: Future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(CONTROL_TIMEOUT_S)

    def add_link(self, dialer: str, target: str, target_port: int, listen_port: int = 0) -> int:
        """Starts the proxy dialer -> target; returns the port the dialer must dial instead."""
        proxy = LinkProxy(self, dialer, target, self.host, target_port)
        self._call(proxy.start(self.host, listen_port))
        self._proxies[(dialer, target, target_port)] = proxy
        return proxy.listen_port

    def is_cut(self, source: str, destination: str) -> bool:
        with self._lock:
            return (source, destination) in self._cuts

    def cut(self, links: Iterable[Link]) -> None:
        """Drops, silently, every message from source to destination for each (source, destination)."""
        with self._lock:
            self._cuts.update(links)

    def cuts(self) -> set[Link]:
        with self._lock:
            return set(self._cuts)

    def heal(self) -> int:
        """Restores every link; closes connections that lost bytes. Returns how many were closed."""
        with self._lock:
            self._cuts.clear()

        async def close_tainted() -> int:
            closed = 0
            for proxy in self._proxies.values():
                for connection in list(proxy.connections):
                    if connection.tainted:
                        proxy.connections.discard(connection)
                        connection.close()
                        closed += 1
            return closed

        return int(self._call(close_tainted()))

    def close(self) -> None:
        async def stop_all() -> None:
            for proxy in self._proxies.values():
                await proxy.stop()

        try:
            self._call(stop_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CONTROL_TIMEOUT_S)


def grudge_links(grudge: dict[str, Iterable[str]]) -> set[Link]:
    """Jepsen's grudge (node -> the nodes it no longer hears from) as directed links to cut."""
    return {(source, destination) for destination, sources in grudge.items() for source in sources}


def isolate(node: str, nodes: Iterable[str]) -> dict[str, set[str]]:
    others = [n for n in nodes if n != node]
    grudge: dict[str, set[str]] = {node: set(others)}
    for other in others:
        grudge[other] = {node}
    return grudge


def bridge(nodes: list[str], bridge_node: str) -> dict[str, set[str]]:
    """Two halves that both hear the bridge node but not each other (3 nodes: A-B, B-C up, A-C cut)."""
    others = [n for n in nodes if n != bridge_node]
    half = len(others) // 2
    left, right = set(others[:half]), set(others[half:])
    grudge: dict[str, set[str]] = {}
    for node in left:
        grudge[node] = set(right)
    for node in right:
        grudge[node] = set(left)
    return grudge


def majorities_ring(nodes: list[str]) -> dict[str, set[str]]:
    """Every node hears a majority (itself and its ring neighbours), and no two the same majority.

    With 3 nodes a majority is 2, so each node hears exactly one other node: in the ring order
    n0 -> n1 -> n2 -> n0 each node hears only its successor. For 5 nodes, each hears its two
    neighbours.
    """
    count = len(nodes)
    majority = count // 2 + 1
    grudge: dict[str, set[str]] = {}
    for position, node in enumerate(nodes):
        if count == 3:
            heard = {nodes[(position + 1) % count]}
        else:
            reach = (majority - 1) // 2
            heard = {nodes[(position + step) % count] for step in range(-reach, reach + 1) if step}
            if len(heard) + 1 < majority:
                heard.add(nodes[(position + reach + 1) % count])
        grudge[node] = {other for other in nodes if other != node and other not in heard}
    return grudge


def one_way(source: str, destination: str) -> dict[str, set[str]]:
    """Only destination stops hearing source; source still hears destination."""
    return {destination: {source}}
