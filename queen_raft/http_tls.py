"""HTTPS for the API: the node's server context, the clients' context, and the rule that a
cluster reachable off loopback serves HTTPS.

The node serves HTTPS only when `http_tls_cert` and `http_tls_key` are set (PEM files; TLS 1.2 or
newer). Clients (the SDK, the CLI, a node asking its peers' /health) verify the nodes' certificates
against a CA file: `cafile=`, `--cacert` or QUEEN_CACERT, else the system's trust store
(queen_raft/client/tls.py).

A node whose config names any address that is not loopback refuses to start without TLS (exit 78,
sysexits' EX_CONFIG): bearer tokens and payloads would cross the network in cleartext. Only
`allow_plaintext_http = true` lets it start, with a warning in its log, for a network the operator
protects otherwise (a VPN, a TLS-terminating proxy on the same host).
"""

from __future__ import annotations

import logging
import ssl

from queen_raft.config import ClusterConfig, is_loopback_host

log = logging.getLogger(__name__)

EXIT_CONFIG = 78  # sysexits' EX_CONFIG


class TlsConfigError(RuntimeError):
    """The node cannot start with this HTTP TLS configuration; the message says what to set."""


def tls_enabled(config: ClusterConfig) -> bool:
    return bool(config.settings.http_tls_cert or config.settings.http_tls_key)


def _non_loopback_addresses(config: ClusterConfig) -> list[str]:
    hosts = [n.host for n in config.nodes] + [route.via_host for n in config.nodes for route in n.dial]
    return sorted({host for host in hosts if not is_loopback_host(host)})


def check_http_tls(config: ClusterConfig) -> None:
    """Raises TlsConfigError when this config may not serve as it is; warns on an allowed plaintext."""
    settings = config.settings
    if bool(settings.http_tls_cert) != bool(settings.http_tls_key):
        raise TlsConfigError(f"{config.source}: TLS needs both http_tls_cert and http_tls_key "
                             "(QUEEN_HTTP_TLS_CERT, QUEEN_HTTP_TLS_KEY), PEM file paths; one is missing")
    if tls_enabled(config):
        return
    remote = _non_loopback_addresses(config)
    if not remote:
        return
    if settings.allow_plaintext_http:
        log.warning("HTTP API without TLS on a network (%s): allow_plaintext_http is set, so bearer tokens and "
                    "payloads cross the network in cleartext", ", ".join(remote))
        return
    raise TlsConfigError(
        f"{config.source}: node address(es) {', '.join(remote)} are not loopback, so the HTTP API must use TLS: "
        "set http_tls_cert and http_tls_key (QUEEN_HTTP_TLS_CERT, QUEEN_HTTP_TLS_KEY) to PEM files, "
        "or allow_plaintext_http = true to serve in cleartext anyway")


def server_ssl_context(config: ClusterConfig) -> ssl.SSLContext | None:
    """The node's context (TLS 1.2 or newer), or None when it serves plain HTTP."""
    cert, key = config.settings.http_tls_cert, config.settings.http_tls_key
    if not cert or not key:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the HTTP TLS certificate {cert} and key {key} "
                             f"(http_tls_cert, http_tls_key): {exc}") from None
    return context


def refuse_to_start_without_tls(config: ClusterConfig) -> ssl.SSLContext | None:
    """The node's check at start: its server context, or exit 78 with the reason in the log."""
    try:
        check_http_tls(config)
        return server_ssl_context(config)
    except TlsConfigError as exc:
        log.critical("node refuses to start: %s", exc)
        raise SystemExit(EXIT_CONFIG) from None
