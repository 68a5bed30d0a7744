"""The guard against an open pickle port: pysyncobj's peer protocol unpickles what it receives, so
a group whose Raft addresses are not all loopback must have a password (which encrypts and
authenticates every frame)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def refuse_open_pickle_port(tenant: str, password: str | None, hosts: Iterable[str]) -> None:
    """Raises ValueError when a host is not loopback and there is no password."""
    if password is None and not all(is_loopback_host(h) for h in hosts):
        raise ValueError(
            f"group {tenant!r}: a Raft address is not loopback and no password is set; the peer "
            "protocol is pickle, so an open port would be remote code execution"
        )
