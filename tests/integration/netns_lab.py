"""Hosts as Linux network namespaces joined by a bridge, for tests that need several machines.

Each host is a namespace with one veth pair: `eth0` inside, holding a private address, and the
other end a port of a bridge in the test's own namespace. The bridge has no address: the hosts
reach one another and nothing else. `BridgeCapture` reads every frame on the bridge's ports
(a packet socket per port: frames forwarded between ports never reach a tap on the bridge
device itself). Needs root and iproute2; `teardown()` removes everything `setup()` made.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
CAPTURE_LIMIT_BYTES = 256 * 1024 * 1024


def lab_unavailable_reason() -> str | None:
    """Why this machine cannot run a namespace lab, or None when it can."""
    if os.geteuid() != 0:
        return "needs root: it creates network namespaces, veth pairs and a bridge"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (apt-get install iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class NetnsLab:
    """`hosts`: name suffix -> address inside its namespace (a /24 shared by all)."""

    tag: str  # short and unique per run: it prefixes every interface and namespace name
    hosts: dict[str, str]
    prefix_len: int = 24
    made_namespaces: list[str] = field(default_factory=list)
    bridge_made: bool = False

    @property
    def bridge(self) -> str:
        return f"qb{self.tag}"

    def namespace(self, host: str) -> str:
        return f"qr{self.tag}-{host}"

    def port(self, host: str) -> str:
        return f"qv{self.tag}{list(self.hosts).index(host)}"  # at most 15 characters (IFNAMSIZ)

    def setup(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self.bridge_made = True
        # Bridged frames skip the host's iptables (br_netfilter would run them through FORWARD).
        _ip("link", "set", self.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0")
        _ip("link", "set", self.bridge, "up")
        for host, address in self.hosts.items():
            ns, port = self.namespace(host), self.port(host)
            _ip("netns", "add", ns)
            self.made_namespaces.append(ns)
            _ip("link", "add", port, "type", "veth", "peer", "name", f"{port}p")
            _ip("link", "set", f"{port}p", "netns", ns)
            _ip("-n", ns, "link", "set", f"{port}p", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{address}/{self.prefix_len}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "set", port, "master", self.bridge)
            _ip("link", "set", port, "up")

    def teardown(self) -> None:
        """Deleting a namespace deletes its veth pair; then the bridge. Best effort, every step."""
        for ns in self.made_namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made_namespaces.clear()
        if self.bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self.bridge_made = False

    def command(self, host: str, *argv: str) -> list[str]:
        """`argv` run inside `host`'s namespace (ip netns exec execs it: the PID is the command's)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def executor(self, host: str) -> ThreadPoolExecutor:
        """One thread living in `host`'s namespace: sockets it opens are that host's."""
        return ThreadPoolExecutor(max_workers=1, initializer=_enter_namespace, initargs=(self.namespace(host),))


def _enter_namespace(ns: str) -> None:
    """setns(2) on the calling thread only: the network namespace is per thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {ns}: {os.strerror(errno)}")
    finally:
        os.close(fd)


class BridgeCapture:
    """Every frame seen on the given interfaces, kept in memory (bounded) until `stop()`."""

    def __init__(self, interfaces: list[str]):
        self.sockets = []
        for name in interfaces:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.bind((name, 0))
            sock.setblocking(False)
            self.sockets.append(sock)
        self.frames: list[bytes] = []
        self.bytes_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bridge-capture", daemon=True)

    def start(self) -> "BridgeCapture":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            readable, _, _ = select.select(self.sockets, [], [], 0.1)
            for sock in readable:
                try:
                    frame = sock.recv(65536)
                except BlockingIOError:
                    continue
                if self.bytes_seen < CAPTURE_LIMIT_BYTES:
                    self.frames.append(frame)
                    self.bytes_seen += len(frame)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for sock in self.sockets:
            sock.close()

    def tcp_payload_bytes(self, port: int) -> int:
        """TCP payload bytes seen to or from `port` (IPv4 over Ethernet): which traffic was there."""
        total = 0
        for frame in self.frames:
            if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:  # IPv4, TCP
                continue
            ip_start, ip_header = 14, (frame[14] & 0x0F) * 4
            ip_total = int.from_bytes(frame[16:18], "big")
            tcp = ip_start + ip_header
            if len(frame) < tcp + 20:
                continue
            ports = int.from_bytes(frame[tcp:tcp + 2], "big"), int.from_bytes(frame[tcp + 2:tcp + 4], "big")
            if port in ports:
                total += ip_total - ip_header - (frame[tcp + 12] >> 4) * 4
        return total

    def contains(self, needle: bytes) -> bool:
        """In one frame, or across consecutive frames (a needle straddling a TCP segment boundary)."""
        return any(needle in frame for frame in self.frames) or needle in b"".join(self.frames)
