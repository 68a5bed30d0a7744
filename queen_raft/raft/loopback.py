"""The guard against an open pickle port: pysyncobj's peer protocol unpickles what it receives, so
a group whose Raft addresses are not all loopback must have a password (which encrypts and
authenticates every frame)."""

from __future__ import annotations

from collections.abc import Iterable

from queen_raft.hosts import is_loopback_host

__all__ = ["is_loopback_host", "refuse_open_pickle_port"]


def refuse_open_pickle_port(tenant: str, password: str | None, hosts: Iterable[str]) -> None:
    """Raises ValueError when a host is not loopback and there is no password."""
    if password is None and not all(is_loopback_host(h) for h in hosts):
        raise ValueError(
            f"group {tenant!r}: a Raft address is not loopback and no password is set; the peer "
            "protocol is pickle, so an open port would be remote code execution"
        )
