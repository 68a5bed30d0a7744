"""Whether a host name or address is this machine's loopback.

The config (plaintext tokens and a Raft port without a password are allowed only on loopback) and
the Raft layer (a group refuses to open a pickle port off loopback without a password) must agree
on it, so both ask here.
"""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """`localhost`, or a loopback IPv4/IPv6 address (an IPv6 address may be written in brackets)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
