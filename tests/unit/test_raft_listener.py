"""The Raft port's listener when the process is out of file descriptors: stock TcpServer unbinds
for good; ResilientTcpServer drops the waiting connection, pauses, and accepts again. The process's
own RLIMIT_NOFILE is cut to what it holds for one poll, and restored."""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import select
import socket

import pytest
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import POLL_EVENT_TYPE, createPoller
from pysyncobj.tcp_server import SERVER_STATE, TcpServer

from queen_raft.raft import listener as listener_module
from queen_raft.raft.listener import ACCEPT_BACKOFF_S, ResilientTcpServer
from queen_raft.raft.transport import GroupTransport, RefusalLog

POLLS = 50
POLL_TIMEOUT_S = 0.02


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def no_descriptor_left():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The limit bounds descriptor numbers: the next one opened gets the lowest free number, so a
    # limit of that number leaves none.
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def poll_until(poller, condition) -> None:
    for _ in range(POLLS):
        poller.poll(POLL_TIMEOUT_S)
        if condition():
            return


@pytest.fixture
def listening():
    """(poller, server class) -> (server, accepted connections, port); the clients and server closed after."""
    made = []

    def make(server_class):
        poller = createPoller("auto")
        accepted: list = []
        port = free_port()
        server = server_class(poller, "127.0.0.1", port, onNewConnection=accepted.append)
        server.bind()
        made.append((server, accepted))
        return poller, server, accepted, port

    yield make
    for server, accepted in made:
        for conn in accepted:
            conn.disconnect()
        server.unbind()


def dial(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5.0) for _ in range(count)]


def test_stock_tcp_server_unbinds_on_emfile(listening):
    """Why ResilientTcpServer exists: stock code closes the Raft port on the first EMFILE."""
    poller, server, accepted, port = listening(TcpServer)
    clients = dial(port, 2)
    with no_descriptor_left():
        poller.poll(POLL_TIMEOUT_S)
    assert accepted == [] and server._TcpServer__state != SERVER_STATE.BINDED
    with pytest.raises(ConnectionRefusedError):
        dial(port, 1)
    for client in clients:
        client.close()


def test_emfile_drops_the_waiting_connection_pauses_and_accepts_again(listening):
    poller, server, accepted, port = listening(ResilientTcpServer)
    clients = dial(port, 3)
    with no_descriptor_left():
        poller.poll(POLL_TIMEOUT_S)
    assert server.bound and server.accepting_paused and accepted == []
    assert server.accepts_out_of_descriptors == 1 and server.accepted_connections_dropped == 1
    assert clients[0].recv(1) == b""  # the first in the backlog was accepted and closed
    poll_until(poller, lambda: False)
    assert accepted == [], "accepting while paused"
    server.resume_if_due(monotonic_time() + ACCEPT_BACKOFF_S)
    poll_until(poller, lambda: len(accepted) == 2)
    assert len(accepted) == 2 and not server.accepting_paused
    late = dial(port, 1)
    poll_until(poller, lambda: len(accepted) == 3)
    assert len(accepted) == 3
    for client in clients + late:
        client.close()


def test_the_transport_binds_again_a_listener_an_error_closed(listening):
    _, server, _, _ = listening(ResilientTcpServer)
    transport = GroupTransport.__new__(GroupTransport)  # only what _keep_listening reads
    transport._server, transport._ready = server, True
    transport._keep_listening(monotonic_time())
    assert transport._ready and transport.listener_rebinds == 0
    server.unbind()  # as the transport's destroy does: it stays unbound
    transport._keep_listening(monotonic_time())
    assert transport._ready and transport.listener_rebinds == 0
    server.bind()
    server._TcpServer__onNewConnection(server._TcpServer__fileno, POLL_EVENT_TYPE.ERROR)
    assert not server.bound and server.closed_by_error
    transport._keep_listening(monotonic_time())
    assert not transport._ready and transport.listener_rebinds == 1  # pysyncobj's _maybeBind binds next
    server.bind()
    assert not server.closed_by_error


def test_out_of_descriptor_accepts_are_counted_in_the_refusal_log(listening, caplog):
    poller, server, _, port = listening(ResilientTcpServer)
    clients = dial(port, 1)
    with no_descriptor_left():
        poller.poll(POLL_TIMEOUT_S)
    transport = GroupTransport.__new__(GroupTransport)
    transport._server, transport._refusals = server, RefusalLog("Raft port test refused connections", interval_s=0.0)
    transport.handshakes_refused = 0
    with caplog.at_level(logging.WARNING, logger="queen_raft.raft.transport"):
        transport._report_refusals(monotonic_time())
    assert "1 accepts failed for lack of file descriptors" in caplog.text
    for client in clients:
        client.close()


def test_a_port_that_cannot_be_bound_is_logged_first_then_every_interval_and_when_bound(caplog):
    """Stock retried a taken port every second without a word: a node that did not serve for as
    long as an outgoing connection held its Raft port said nothing of why."""
    poller = createPoller("auto")
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    server = ResilientTcpServer(poller, "127.0.0.1", port, onNewConnection=lambda conn: None)
    try:
        with caplog.at_level(logging.WARNING, logger="queen_raft.raft.listener"):
            for _ in range(3):
                with pytest.raises(OSError):
                    server.bind()
            failures = [r.getMessage() for r in caplog.records if "cannot bind" in r.getMessage()]
            assert len(failures) == 1 and f"127.0.0.1:{port}" in failures[0]
            assert "Address already in use" in failures[0] and server.bind_failures == 3
            server._bind_failure_logged_at -= listener_module.BIND_FAILURE_LOG_S  # the interval passed
            with pytest.raises(OSError):
                server.bind()
            failures = [r.getMessage() for r in caplog.records if "cannot bind" in r.getMessage()]
            assert len(failures) == 2 and "4 attempts" in failures[1]
            holder.close()
            server.bind()
            assert server.bound
            assert any(f"bound the Raft port 127.0.0.1:{port} after" in r.getMessage() for r in caplog.records)
    finally:
        holder.close()
        server.unbind()


def connected_without_accept(port: int, count: int, wait_s: float) -> int:
    """How many of `count` non-blocking connects complete within wait_s while nobody accepts."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sockets.append(sock)
        poller = select.poll()
        for sock in sockets:
            poller.register(sock, select.POLLOUT)
        done: set[int] = set()
        deadline = monotonic_time() + wait_s
        while len(done) < count and monotonic_time() < deadline:
            for fd, _ in poller.poll(50):
                poller.unregister(fd)
                done.add(fd)
        return sum(1 for sock in sockets if sock.fileno() in done
                   and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("server_class,completes", [(TcpServer, False), (ResilientTcpServer, True)])
def test_a_burst_of_connections_completes_while_the_listener_has_not_accepted_them(listening, server_class, completes):
    # Stock listens with a backlog of 5: the rest of a burst waits for SYN retries (1 s, 2 s, ...).
    _, _, _, port = listening(server_class)
    burst = 64
    assert (connected_without_accept(port, burst, wait_s=0.5) == burst) is completes
