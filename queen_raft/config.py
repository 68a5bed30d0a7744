"""A cluster's configuration: one TOML file (docs/spec.md section 6) plus `QUEEN_*` environment overrides.

Everything here is parsed and checked once, at start, so that a bad file stops the node with a
message naming the key instead of failing later inside a request or a Raft group.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from queen_raft.config_settings import (
    DEFAULT_TIMERS_MAX_PENDING,
    ELECTION_MAX_CEILING_S,
    ENCRYPTION_KEY_RE,
    HTTP_MAX_BODY_CEILING,
    MIB,
    SETTING_SPECS,
    TIMER_MEMORY_BYTES,
    TIMERS_MEMORY_BUDGET_BYTES,
    ConfigError,
    Settings,
    _parse_settings,
)
from queen_raft.hosts import is_loopback_host

# Re-exported: the settings are config_settings.py's, and callers import them from here.
__all__ = [
    "DEFAULT_TIMERS_MAX_PENDING", "ELECTION_MAX_CEILING_S", "ENCRYPTION_KEY_RE", "HTTP_MAX_BODY_CEILING", "MIB",
    "SETTING_SPECS", "TIMER_MEMORY_BYTES", "TIMERS_MEMORY_BUDGET_BYTES", "ConfigError", "Settings",
    "ClusterConfig", "DialRoute", "NodeConfig", "TenantConfig", "TokenConfig", "is_loopback_host",
    "load_config", "parse_config",
]

LEVELS = ("admin", "read-write", "read-only", "write-only")

# Tenant names become directory names and metric labels: keep them to a portable alphabet.
TENANT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NODE_ID_RE = TENANT_NAME_RE
SHA256_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
# A tenant's `timers_max_pending = "unlimited"`: no quota for that tenant.
UNLIMITED = "unlimited"

# The single-node dev config, used when no --config is given (a fresh clone, `queen-raft node`).
# It ships inside the package (package data), so an installed queen-raft finds it too;
# cluster_configs/single.toml is a link to it for `make cluster`.
EMBEDDED_DEFAULT_CONFIG = Path(__file__).resolve().parent / "default_config" / "single.toml"


@dataclass(frozen=True)
class DialRoute:
    """One entry of a node's `[nodes.dial]`: reach a peer's Raft ports through another address.

    The key names the peer by its base Raft address (`host:raft_port`, tenant 0's group); the route
    applies to every tenant with the same offset on both sides, so tenant i dials via_port + i. One
    key therefore reroutes (and lets a proxy cut) the whole link to that peer, every group at once.
    """

    peer_id: str
    peer_host: str
    peer_raft_port: int
    via_host: str
    via_port: int


@dataclass(frozen=True)
class NodeConfig:
    id: str
    host: str
    http_port: int
    raft_port: int
    dial: tuple[DialRoute, ...] = ()
    scheme: str = "http"  # "https" when the cluster's settings name a TLS certificate

    @property
    def http_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.http_port}"

    def raft_addr(self, tenant_index: int) -> str:
        """Tenant i's group listens on raft_port + i (docs/spec.md section 6)."""
        return f"{self.host}:{self.raft_port + tenant_index}"

    def dial_map(self, tenant_index: int) -> dict[str, str]:
        """Tenant i's dial map for queen_raft.raft.TenantGroup: peer Raft address -> address to dial."""
        return {
            f"{route.peer_host}:{route.peer_raft_port + tenant_index}": f"{route.via_host}:{route.via_port + tenant_index}"
            for route in self.dial
        }


@dataclass(frozen=True)
class TokenConfig:
    sha256: str  # hex digest of the token; plaintext is never kept after loading
    level: str
    tenant: str
    sub: str  # producerSub stamped on what this token produces
    plaintext: str | None = None  # kept only for dev configs, so `make cluster` can print it


@dataclass(frozen=True)
class TenantConfig:
    name: str
    index: int  # place in the config: decides the Raft port offset
    tokens: tuple[TokenConfig, ...]
    # This tenant's pending-timer quota: an int, UNLIMITED, or None for the cluster's setting.
    timers_max_pending: int | str | None = None


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    data_dir: Path
    nodes: tuple[NodeConfig, ...]
    tenants: tuple[TenantConfig, ...]
    settings: Settings
    source: str = "<config>"
    tokens_by_sha256: Mapping[str, TokenConfig] = field(default_factory=dict)

    def node(self, node_id: str) -> NodeConfig:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise ConfigError(f"{self.source}: no node with id {node_id!r} (nodes: {', '.join(n.id for n in self.nodes)})")

    def tenant(self, name: str) -> TenantConfig:
        for tenant in self.tenants:
            if tenant.name == name:
                return tenant
        raise KeyError(name)

    def timers_max_pending(self, tenant: str) -> int | None:
        """The tenant's pending-timer quota (None: no quota): its own key, else the setting."""
        own = self.tenant(tenant).timers_max_pending
        if own is None:
            return self.settings.timers_max_pending
        return None if own == UNLIMITED else own

    def group_data_dir(self, node_id: str, tenant: str) -> Path:
        return self.data_dir / node_id / tenant

    def find_token(self, token: str) -> TokenConfig | None:
        """Constant-time compare on the digest, so a timing probe learns nothing of a token."""
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        found = self.tokens_by_sha256.get(digest)
        if found is not None and hmac.compare_digest(found.sha256, digest):
            return found
        return None


def _expect_table(value: Any, where: str, source: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {where} must be a table")
    return value


def _expect_keys(table: dict, where: str, source: str, required: set[str], optional: set[str]) -> None:
    missing = required - table.keys()
    if missing:
        raise ConfigError(f"{source}: {where} is missing {', '.join(sorted(missing))}")
    unknown = table.keys() - required - optional
    if unknown:
        raise ConfigError(f"{source}: {where} has unknown key(s) {', '.join(sorted(unknown))}")


def _expect_port(value: Any, where: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise ConfigError(f"{source}: {where} must be a port number 1..65535, got {value!r}")
    return value


def _split_host_port(value: Any, where: str, source: str) -> tuple[str, int]:
    """`host:port` (the last colon splits, so `::1:7400` is IPv6 loopback, as Raft addresses are written)."""
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{source}: {where} must be a host:port string, got {value!r}")
    host, _, port_text = value.rpartition(":")
    if not host or not port_text.isdigit():
        raise ConfigError(f"{source}: {where} must be a host:port string, got {value!r}")
    return host, _expect_port(int(port_text), where, source)


def _parse_dial(raw: Any, node: NodeConfig, nodes: list[NodeConfig], tenant_count: int,
                source: str) -> tuple[DialRoute, ...]:
    """A node's `[nodes.dial]`: base Raft address of a peer -> base address to dial it through."""
    table = _expect_table(raw, f"node {node.id!r} dial", source)
    peers_by_base = {f"{peer.host}:{peer.raft_port}": peer for peer in nodes if peer.id != node.id}
    routes: list[DialRoute] = []
    for key, value in table.items():
        where = f"node {node.id!r} dial[{key!r}]"
        peer = peers_by_base.get(key)
        if peer is None:
            raise ConfigError(
                f"{source}: {where}: a key must be a peer's base Raft address host:raft_port as its [[nodes]] "
                f"entry writes it (one of: {', '.join(sorted(peers_by_base)) or 'none, no other node'})")
        via_host, via_port = _split_host_port(value, where, source)
        if via_port + tenant_count - 1 > 65535:
            raise ConfigError(f"{source}: {where}: {value} + {tenant_count - 1} (the last tenant's offset) is past 65535")
        routes.append(DialRoute(peer.id, peer.host, peer.raft_port, via_host, via_port))
    return tuple(routes)


def _check_dial_targets(nodes: list[NodeConfig], tenant_count: int, bound: dict[tuple[str, int], str], source: str) -> None:
    """A dial target is a different address for one peer: it may not be an address the cluster
    listens on (that is another node's port, or the peer's own, which needs no route), and two
    peers may not share one (their links would reach the same place)."""
    for node in nodes:
        used: dict[tuple[str, int], str] = {}
        for route in node.dial:
            for offset in range(tenant_count):
                target = (route.via_host, route.via_port + offset)
                where = f"node {node.id!r} dial to {route.peer_id!r} ({target[0]}:{target[1]})"
                if target in bound:
                    raise ConfigError(f"{source}: {where} is an address the cluster listens on ({bound[target]})")
                if target in used:
                    raise ConfigError(f"{source}: {where} is also the dial target of {used[target]!r}")
                used[target] = route.peer_id


def _parse_token(raw: Any, tenant: str, index: int, source: str) -> TokenConfig:
    where = f"tenant {tenant!r} token #{index + 1}"
    table = _expect_table(raw, where, source)
    _expect_keys(table, where, source, {"level"}, {"token", "token_sha256", "sub"})
    level = table["level"]
    if level not in LEVELS:
        raise ConfigError(f"{source}: {where}: level {level!r} is not one of {', '.join(LEVELS)}")
    has_plain, has_hash = "token" in table, "token_sha256" in table
    if has_plain == has_hash:
        raise ConfigError(f"{source}: {where}: give exactly one of token or token_sha256")
    plaintext = None
    if has_plain:
        plaintext = table["token"]
        if not isinstance(plaintext, str) or not plaintext:
            raise ConfigError(f"{source}: {where}: token must be a non-empty string")
        digest = hashlib.sha256(plaintext.encode("utf-8")).hexdigest()
    else:
        digest = table["token_sha256"]
        if not isinstance(digest, str) or not SHA256_HEX_RE.match(digest.lower()):
            raise ConfigError(f"{source}: {where}: token_sha256 must be 64 hex characters")
        digest = digest.lower()
    sub = table.get("sub", f"{tenant}:{level}:{digest[:12]}")
    if not isinstance(sub, str) or not sub:
        raise ConfigError(f"{source}: {where}: sub must be a non-empty string")
    return TokenConfig(sha256=digest, level=level, tenant=tenant, sub=sub, plaintext=plaintext)


def _tenant_quota(table: dict, tenant: str, source: str) -> int | str | None:
    """A tenant's own `timers_max_pending`: an integer >= 0, or "unlimited"; None when absent."""
    value = table.get("timers_max_pending")
    if value is None or value == UNLIMITED:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{source}: tenant {tenant!r} timers_max_pending must be an integer >= 0 or "
                          f"{UNLIMITED!r}, got {value!r}")
    return value


def _parse_node(raw_node: Any, i: int, source: str) -> NodeConfig:
    """One [[nodes]] entry, without its dial map (that needs every node)."""
    where = f"node #{i + 1}"
    table = _expect_table(raw_node, where, source)
    _expect_keys(table, where, source, {"id", "host", "http_port", "raft_port"}, {"dial"})
    node_id = table["id"]
    if not isinstance(node_id, str) or not NODE_ID_RE.match(node_id):
        raise ConfigError(f"{source}: {where}: id {node_id!r} must match {NODE_ID_RE.pattern}")
    if not isinstance(table["host"], str) or not table["host"]:
        raise ConfigError(f"{source}: node {node_id!r}: host must be a non-empty string")
    return NodeConfig(
        id=node_id,
        host=table["host"],
        http_port=_expect_port(table["http_port"], f"node {node_id!r} http_port", source),
        raft_port=_expect_port(table["raft_port"], f"node {node_id!r} raft_port", source),
    )


def _parse_tenant(raw_tenant: Any, i: int, tokens_by_sha256: dict[str, TokenConfig], source: str) -> TenantConfig:
    """One [[tenants]] entry; its tokens go into `tokens_by_sha256`, where a token may appear once."""
    where = f"tenant #{i + 1}"
    table = _expect_table(raw_tenant, where, source)
    _expect_keys(table, where, source, {"name", "tokens"}, {"timers_max_pending"})
    name = table["name"]
    if not isinstance(name, str) or not TENANT_NAME_RE.match(name):
        raise ConfigError(f"{source}: {where}: name {name!r} must match {TENANT_NAME_RE.pattern}")
    raw_tokens = table["tokens"]
    if not isinstance(raw_tokens, list) or not raw_tokens:
        raise ConfigError(f"{source}: tenant {name!r} needs at least one [[tenants.tokens]]")
    tokens = tuple(_parse_token(t, name, j, source) for j, t in enumerate(raw_tokens))
    for token in tokens:
        if token.sha256 in tokens_by_sha256:
            raise ConfigError(f"{source}: tenant {name!r}: a token is listed twice (tokens name one tenant and level)")
        tokens_by_sha256[token.sha256] = token
    return TenantConfig(name=name, index=i, tokens=tokens, timers_max_pending=_tenant_quota(table, name, source))


def _listening_addresses(nodes: list[NodeConfig], tenants: list[TenantConfig], source: str) -> dict[tuple[str, int], str]:
    """Every port a node listens on, on its host: HTTP, and one Raft port per tenant; none twice."""
    taken: dict[tuple[str, int], str] = {}
    for node in nodes:
        wanted = [(node.http_port, f"node {node.id!r} http_port")]
        for tenant in tenants:
            port = node.raft_port + tenant.index
            if port > 65535:
                raise ConfigError(f"{source}: node {node.id!r}: raft_port + {tenant.index} (tenant {tenant.name!r}) is past 65535")
            wanted.append((port, f"node {node.id!r} raft port of tenant {tenant.name!r}"))
        for port, what in wanted:
            key = (node.host, port)
            if key in taken:
                raise ConfigError(f"{source}: {what} ({node.host}:{port}) collides with {taken[key]}")
            taken[key] = what
    return taken


def _refuse_open_secrets_off_loopback(nodes: list[NodeConfig], tokens_by_sha256: dict[str, TokenConfig],
                                      settings: Settings, source: str) -> None:
    """Off loopback, tokens are stored hashed and the Raft ports have a password (docs/spec.md section 7).

    Every address in the config counts: the nodes' and their dial targets."""
    all_loopback = all(is_loopback_host(n.host) for n in nodes) and all(
        is_loopback_host(route.via_host) for n in nodes for route in n.dial)
    if all_loopback:
        return
    plain = [f"{t.tenant}/{t.level}" for t in tokens_by_sha256.values() if t.plaintext is not None]
    if plain:
        raise ConfigError(
            f"{source}: plaintext tokens ({', '.join(plain)}) are allowed only when every node address and "
            "dial target is loopback; store them as token_sha256"
        )
    if not settings.raft_password and not settings.raft_password_file:
        raise ConfigError(
            f"{source}: a node address or dial target is not loopback, so the Raft ports need a password "
            "named in the config (settings raft_password or raft_password_file, or QUEEN_RAFT_PASSWORD or "
            "QUEEN_RAFT_PASSWORD_FILE): the peer protocol is pickle"
        )


def parse_config(raw: Mapping[str, Any], env: Mapping[str, str] | None = None, source: str = "<config>") -> ClusterConfig:
    """Checks a decoded TOML document and applies the QUEEN_* overrides found in `env`."""
    env = os.environ if env is None else env
    _expect_keys(dict(raw), "the file", source, {"cluster", "nodes", "tenants"}, {"settings"})
    cluster = _expect_table(raw["cluster"], "[cluster]", source)
    _expect_keys(cluster, "[cluster]", source, {"name", "data_dir"}, set())
    if not isinstance(cluster["name"], str) or not cluster["name"]:
        raise ConfigError(f"{source}: [cluster].name must be a non-empty string")
    if not isinstance(cluster["data_dir"], str) or not cluster["data_dir"]:
        raise ConfigError(f"{source}: [cluster].data_dir must be a non-empty string")

    raw_nodes = raw["nodes"]
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise ConfigError(f"{source}: [[nodes]] must list at least one node")
    raw_tenants = raw["tenants"]
    if not isinstance(raw_tenants, list) or not raw_tenants:
        raise ConfigError(f"{source}: [[tenants]] must list at least one tenant")

    nodes = [_parse_node(raw_node, i, source) for i, raw_node in enumerate(raw_nodes)]
    ids = [n.id for n in nodes]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: node ids must be unique, got {', '.join(ids)}")
    # Dial maps need every node (their keys are peers) and the tenant count (the port offsets).
    tenant_count = len(raw_tenants) if isinstance(raw_tenants, list) else 0
    nodes = [
        replace(node, dial=_parse_dial(raw_node["dial"], node, nodes, tenant_count, source)) if "dial" in raw_node else node
        for node, raw_node in zip(nodes, raw_nodes)
    ]

    tokens_by_sha256: dict[str, TokenConfig] = {}
    tenants = [_parse_tenant(raw_tenant, i, tokens_by_sha256, source) for i, raw_tenant in enumerate(raw_tenants)]
    names = [t.name for t in tenants]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: tenant names must be unique, got {', '.join(names)}")

    _check_dial_targets(nodes, len(tenants), _listening_addresses(nodes, tenants, source), source)

    settings = _parse_settings(_expect_table(raw.get("settings", {}), "[settings]", source), env, source)
    if settings.http_tls_cert:
        nodes = [replace(node, scheme="https") for node in nodes]

    _refuse_open_secrets_off_loopback(nodes, tokens_by_sha256, settings, source)
    return ClusterConfig(
        name=cluster["name"],
        data_dir=Path(cluster["data_dir"]),
        nodes=tuple(nodes),
        tenants=tuple(tenants),
        settings=settings,
        source=source,
        tokens_by_sha256=tokens_by_sha256,
    )


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> ClusterConfig:
    """Reads a TOML file (the embedded single-node default when `path` is None)."""
    path = Path(path) if path is not None else EMBEDDED_DEFAULT_CONFIG
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(raw, env=env, source=str(path))
