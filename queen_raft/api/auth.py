"""Bearer tokens: which tenant a request belongs to, and whether its level allows the route (docs/spec.md section 7)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from aiohttp import web

from queen_raft.api.errors import forbidden, unauthorized
from queen_raft.config import ClusterConfig


class Access(Enum):
    """What a route does, which decides the levels that may call it."""

    PRODUCE = "produce"  # push, schedule: write-only may do it (a timer is a produce)
    READ = "read"  # peek, list, fetch: no state change
    CONSUME = "consume"  # pop, ack, cancel: reads and changes state
    CONFIGURE = "configure"  # queue options
    STORE = "write KV"  # KV writes: reads and changes state, so not for write-only tokens
    ADMIN = "admin"  # operator switches (pause scheduling)


ALLOWED_LEVELS: dict[Access, frozenset[str]] = {
    Access.PRODUCE: frozenset({"admin", "read-write", "write-only"}),
    Access.READ: frozenset({"admin", "read-write", "read-only"}),
    Access.CONSUME: frozenset({"admin", "read-write"}),
    Access.CONFIGURE: frozenset({"admin", "read-write"}),
    Access.STORE: frozenset({"admin", "read-write"}),
    Access.ADMIN: frozenset({"admin"}),
}


@dataclass(frozen=True)
class Principal:
    tenant: str
    level: str
    sub: str  # stamped as producerSub on what this principal produces


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# Authorization header values already verified against a config -> (that config, its Principal).
# The SHA-256 of find_token and a new Principal cost ~4% of the loop thread's time per single-op
# call; a client sends the same header on every call. Only headers that named a known token are
# kept, so the entries are bounded by the configs' tokens (and the header spellings clients use);
# the cap is a backstop against a client cycling spellings ("Bearer x", "bearer  x", ...), and a
# full cache is simply emptied. A miss costs a dict lookup whose time depends on the header's
# (randomly keyed) hash, not on how much of a real token it shares, then the constant-time check.
PRINCIPAL_CACHE_MAX = 1024
_principal_by_header: dict[str, tuple[ClusterConfig, Principal]] = {}


def authenticate(config: ClusterConfig, request: web.Request) -> Principal:
    """401 when the token is missing or unknown."""
    header = request.headers.get("Authorization", "")
    cached = _principal_by_header.get(header)
    if cached is not None and cached[0] is config:  # a config is frozen: same object, same tokens
        return cached[1]
    token = bearer_token(request)
    if token is None:
        raise unauthorized()
    found = config.find_token(token)
    if found is None:
        raise unauthorized()
    principal = Principal(tenant=found.tenant, level=found.level, sub=found.sub)
    if len(_principal_by_header) >= PRINCIPAL_CACHE_MAX:
        _principal_by_header.clear()
    _principal_by_header[header] = (config, principal)
    return principal


def authorize(principal: Principal, access: Access) -> None:
    """403 when the token's level does not allow this kind of route."""
    if principal.level not in ALLOWED_LEVELS[access]:
        raise forbidden(f"a {principal.level} token may not {access.value} here")


def require(config: ClusterConfig, request: web.Request, access: Access) -> Principal:
    principal = authenticate(config, request)
    authorize(principal, access)
    return principal
