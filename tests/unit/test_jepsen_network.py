"""The per-link proxies on loopback (no cluster): pass, silent drop, one-way cut, heal."""

from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from jepsen.network import LinkNetwork, bridge, grudge_links, isolate, majorities_ring

# Long enough for loopback, short enough that a silent drop is noticed quickly.
READ_TIMEOUT_S = 0.5


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(4096)
            if not data:
                return
            self.request.sendall(data)


@pytest.fixture
def echo_port():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def network():
    net = LinkNetwork()
    yield net
    net.close()


def _exchange(sock: socket.socket, payload: bytes) -> bytes | None:
    sock.sendall(payload)
    try:
        return sock.recv(4096)
    except socket.timeout:
        return None


def _dial(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
    sock.settimeout(READ_TIMEOUT_S)
    return sock


def test_pass_then_silent_drop_then_heal(echo_port, network):
    port = network.add_link("a", "b", echo_port)
    sock = _dial(port)
    assert _exchange(sock, b"one") == b"one"
    network.cut({("a", "b"), ("b", "a")})
    assert _exchange(sock, b"two") is None  # silent: no reset, no answer
    assert network.heal() == 1  # the connection that lost bytes is closed at heal
    sock.close()
    fresh = _dial(port)
    assert _exchange(fresh, b"three") == b"three"
    fresh.close()


def test_one_way_cut_drops_only_that_direction(echo_port, network):
    port = network.add_link("a", "b", echo_port)
    sock = _dial(port)
    network.cut({("b", "a")})  # a no longer hears b: the echo is lost, the request arrives
    assert _exchange(sock, b"ping") is None
    network.heal()
    sock.close()


def test_grudges_for_three_nodes():
    nodes = ["n1", "n2", "n3"]
    assert grudge_links(isolate("n1", nodes)) == {("n2", "n1"), ("n3", "n1"), ("n1", "n2"), ("n1", "n3")}
    assert grudge_links(bridge(nodes, "n2")) == {("n1", "n3"), ("n3", "n1")}
    ring = majorities_ring(nodes)
    heard = {node: set(nodes) - {node} - ring[node] for node in nodes}
    assert all(len(h) == 1 for h in heard.values())
    assert len({frozenset(h | {node}) for node, h in heard.items()}) == 3  # no two see the same majority
