"""Ids minted by the proposing node: they travel in the command, so every replica stores the same one."""

from __future__ import annotations

import os
import uuid

from queen_raft.clock import wall_ms

_MS_MASK = (1 << 48) - 1


def uuid7(now_ms: int | None = None) -> str:
    """A UUIDv7 (RFC 9562): 48-bit ms timestamp, then random bits, so ids sort roughly by creation."""
    ms = (wall_ms() if now_ms is None else now_ms) & _MS_MASK
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def new_message_id() -> str:
    return uuid7()


def new_lease_id() -> str:
    return uuid7()
