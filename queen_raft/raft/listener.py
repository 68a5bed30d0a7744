"""pysyncobj's Raft port listener, kept listening when the process runs out of file descriptors.

Stock TcpServer unbinds on any accept error but EAGAIN, and TCPTransport binds only until it is
ready, never again: one EMFILE (a flood of connections to the Raft port, or a process at its
RLIMIT_NOFILE) left the node deaf to its peers for good. ResilientTcpServer instead:

- out of descriptors (EMFILE, ENFILE, ENOBUFS, ENOMEM): the pending connection is dropped through a
  spare descriptor held for this (close the spare, accept, close, reopen the spare), and accepting
  pauses for ACCEPT_BACKOFF_S: the listening socket stays readable while connections wait in its
  backlog, so a level-triggered poll would otherwise spin on the same error. The transport's tick
  resumes it (resume_if_due). Each such accept is counted (accepts_out_of_descriptors) and the
  transport logs the count with its other refusals;
- a connection that went away before it was accepted (ECONNABORTED, EPROTO, EPERM, EINTR), or a
  socket option that fails on an accepted socket: that connection is closed, the server keeps going;
- any other error, or an ERROR event on the listening socket: unbound, as stock; the transport then
  binds again (GroupTransport._keep_listening), where stock stayed unbound.

A port that cannot be bound (another process listens on it, or an outgoing connection of this
machine holds it as its local port: a port inside the kernel's ephemeral range,
net.ipv4.ip_local_port_range, can be handed to any connection while the node is down) is retried
every bindRetryTime, as stock does, and the node serves only once every group's port is bound.
Stock says nothing meanwhile; this logs the error at the first failure and every
BIND_FAILURE_LOG_S after it, and once more when the port is bound.

It overrides the private, name-mangled accept callback of pysyncobj 0.3.17's TcpServer (bind()
subscribes `self.__onNewConnection`, found on the subclass under its mangled name);
tests/unit/test_raft_recipe_wire.py fails if the members it reads change.
"""

from __future__ import annotations

import errno
import logging
import os
import socket

import pysyncobj.tcp_server
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_server import SERVER_STATE, TcpServer

log = logging.getLogger(__name__)

# Often enough that an operator watching a node that does not serve sees why, seldom enough that a
# port held for hours does not flood the log (the retries run every bindRetryTime, 1 s).
BIND_FAILURE_LOG_S = 10.0
# Long enough that a flood cannot keep the tick thread busy refusing, short enough that a peer
# whose connection waits in the backlog is accepted within its connection timeout.
ACCEPT_BACKOFF_S = 0.1
# Connections the kernel completes and queues for accept. pysyncobj listens with 5: past five
# connections waiting (a peer's reconnect during a burst of others, a flood of ones that never
# authenticate), the kernel drops the next SYN and the dialler retries after 1 s, then 2, 4, ...:
# 300 connections at once took 47 s to connect. Redis and nginx listen with 511; the kernel caps
# it at net.core.somaxconn.
LISTEN_BACKLOG = 511
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The connection is gone (reset before accept) or the call was interrupted: nothing to undo.
GONE_BEFORE_ACCEPT = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EPROTO, errno.EPERM,
                                errno.EINTR})


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class ResilientTcpServer(TcpServer):
    """A TcpServer that survives running out of file descriptors (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._spare_fd: int | None = None
        self._paused_until: float | None = None
        # Unbound by an error (not by the transport's destroy): the transport binds it again.
        self.closed_by_error = False
        self.accepts_out_of_descriptors = 0
        self.accepted_connections_dropped = 0
        self.bind_failures = 0
        self._bind_failing_since: float | None = None
        self._bind_failure_logged_at = 0.0

    @property
    def bound(self) -> bool:
        return self._TcpServer__state == SERVER_STATE.BINDED

    @property
    def accepting_paused(self) -> bool:
        return self._paused_until is not None

    def bind(self) -> None:
        try:
            super().bind()
        except OSError as exc:
            self._report_bind_failure(exc)
            raise
        try:
            self._TcpServer__socket.listen(LISTEN_BACKLOG)  # a listening socket takes a new backlog
        except OSError:
            pass  # it keeps stock's: slower to connect to under a burst, no less correct
        if self._bind_failing_since is not None:
            log.warning("bound the Raft port %s after %.1f s of failed attempts", self._address(),
                        monotonic_time() - self._bind_failing_since)
            self._bind_failing_since = None
        self.closed_by_error = False
        self._paused_until = None
        if self._spare_fd is None:
            self._spare_fd = _open_spare()

    def _address(self) -> str:
        return f"{self._TcpServer__host}:{self._TcpServer__port}"

    def _report_bind_failure(self, exc: OSError) -> None:
        self.bind_failures += 1
        now = monotonic_time()
        if self._bind_failing_since is None:
            self._bind_failing_since = now
        elif now - self._bind_failure_logged_at < BIND_FAILURE_LOG_S:
            return
        self._bind_failure_logged_at = now
        log.error("cannot bind the Raft port %s (%s), %d attempts in %.0f s; retrying: this node serves "
                  "once every group's port is bound", self._address(), exc.strerror or exc,
                  self.bind_failures, now - self._bind_failing_since)

    def unbind(self) -> None:
        super().unbind()
        self._paused_until = None
        self._close_spare()

    def _unbind_on_error(self) -> None:
        self.unbind()
        self.closed_by_error = True

    def _close_spare(self) -> None:
        if self._spare_fd is not None:
            os.close(self._spare_fd)
            self._spare_fd = None

    def _TcpServer__onNewConnection(self, descr, event) -> None:
        if event & POLL_EVENT_TYPE.READ:
            self._accept_one()
        if event & POLL_EVENT_TYPE.ERROR and self.bound:
            self._unbind_on_error()

    def _accept_one(self) -> None:
        listening = self._TcpServer__socket
        try:
            sock, _ = listening.accept()
        except OSError as exc:
            if exc.errno in OUT_OF_DESCRIPTORS:
                self.accepts_out_of_descriptors += 1
                self._drop_pending(listening)
                self._pause()
            elif exc.errno not in GONE_BEFORE_ACCEPT:
                self._unbind_on_error()
            return
        try:
            self._serve(sock)
        except OSError:
            self.accepted_connections_dropped += 1
            sock.close()

    def _serve(self, sock: socket.socket) -> None:
        # Stock's accept body: the options, then the connection class pysyncobj.tcp_server names
        # (FastTcpConnection once the connection recipe is installed).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._TcpServer__sendBufferSize)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._TcpServer__recvBufferSize)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(0)
        conn = pysyncobj.tcp_server.TcpConnection(
            poller=self._TcpServer__poller, socket=sock, timeout=self._TcpServer__connectionTimeout,
            sendBufferSize=self._TcpServer__sendBufferSize, recvBufferSize=self._TcpServer__recvBufferSize,
            keepalive=self._TcpServer__keepalive,
        )
        self._TcpServer__onNewConnectionCallback(conn)

    def _drop_pending(self, listening: socket.socket) -> None:
        """Accept the waiting connection on the spare descriptor and close it at once: the dialler
        sees a close (a peer retries) instead of waiting in the backlog."""
        if self._spare_fd is None:
            return
        self._close_spare()
        try:
            sock, _ = listening.accept()
        except OSError:
            pass
        else:
            sock.close()
            self.accepted_connections_dropped += 1
        self._spare_fd = _open_spare()

    def _pause(self) -> None:
        fileno = self._TcpServer__fileno
        if fileno is not None:
            self._TcpServer__poller.unsubscribe(fileno)
        self._paused_until = monotonic_time() + ACCEPT_BACKOFF_S

    def resume_if_due(self, now: float) -> None:
        """Accept again once the backoff is over (called from the transport's tick)."""
        if self._paused_until is None or now < self._paused_until:
            return
        self._paused_until = None
        fileno = self._TcpServer__fileno
        if self.bound and fileno is not None:
            self._TcpServer__poller.subscribe(fileno, self._TcpServer__onNewConnection,
                                              POLL_EVENT_TYPE.READ | POLL_EVENT_TYPE.ERROR)
        if self._spare_fd is None:
            self._spare_fd = _open_spare()
