"""`queen-raft cluster backup`: every tenant's snapshot, through the cluster's API, into a directory.

Each tenant's snapshot is fetched from GET /api/v1/admin/snapshot with that tenant's admin token,
asking the node that /health names leader of the tenant first (the barrier and the copy are then
local to the leader), and any other node if that one cannot answer. The body is streamed to
`<tenant>.snapshot.part` while it is hashed; it is kept only if its sha256 matches the node's
X-Queen-Snapshot-Sha256, then renamed. The manifest is written last: a directory without one is
not a backup (an interrupted run leaves nothing that restore would take).

`progress` gets one line per tenant written (the command's summary); `open_bar(description,
total_bytes, "B")`, when given, gets a bar per tenant download, updated with each chunk's size (the CLI
draws it on a terminal: cli/progress.py).
"""

from __future__ import annotations

import json
import hashlib
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queen_raft.backup.manifest import BackupRefused, TenantFile, snapshot_file_name, write_manifest
from queen_raft.config import ClusterConfig

SNAPSHOT_PATH = "/api/v1/admin/snapshot"
HEALTH_TIMEOUT_S = 2.0
SNAPSHOT_TIMEOUT_S = 120.0
CHUNK_BYTES = 1 << 20
# (description, total or None, unit) -> an object with update(n) and close(), like a tqdm bar.
OpenBar = Callable[[str, "int | None", str], Any]


def admin_tokens(config: ClusterConfig, given: dict[str, str]) -> dict[str, str]:
    """Each tenant's admin token: the one given (--token TENANT=TOKEN), else a plaintext one in a
    dev config; BackupRefused naming the tenants that have neither (configs keep sha256 only)."""
    tokens, missing = {}, []
    for tenant in config.tenants:
        token = given.get(tenant.name) or next(
            (t.plaintext for t in tenant.tokens if t.level == "admin" and t.plaintext), None)
        if token is None:
            missing.append(tenant.name)
        tokens[tenant.name] = token
    unknown = sorted(set(given) - {t.name for t in config.tenants})
    if unknown:
        raise BackupRefused(f"--token names tenants that are not in the config: {', '.join(unknown)}")
    if missing:
        raise BackupRefused(f"no admin token for tenant(s) {', '.join(missing)}: give --token TENANT=TOKEN")
    return tokens


def _leader_first(config: ClusterConfig, tenant: str, context: ssl.SSLContext | None) -> list[str]:
    urls = [node.http_url for node in config.nodes]
    for url in urls:
        try:
            with urllib.request.urlopen(url + "/health", timeout=HEALTH_TIMEOUT_S, context=context) as answer:
                health = json.loads(answer.read())
        except (OSError, ValueError):
            continue
        group = (health.get("groups") or {}).get(tenant) or {}
        if group.get("role") == "leader":
            return [url] + [u for u in urls if u != url]
    return urls


def fetch_tenant(url: str, tenant: str, token: str, directory: Path, context: ssl.SSLContext | None,
                 open_bar: OpenBar | None = None) -> TenantFile:
    request = urllib.request.Request(url + SNAPSHOT_PATH, headers={"Authorization": f"Bearer {token}"})
    name = snapshot_file_name(tenant)
    part = directory / (name + ".part")
    with urllib.request.urlopen(request, timeout=SNAPSHOT_TIMEOUT_S, context=context) as answer:
        if answer.headers.get("X-Queen-Tenant") != tenant:
            raise BackupRefused(f"{url}: the admin token given for {tenant} is a token of "
                                f"{answer.headers.get('X-Queen-Tenant')!r}")
        expected = answer.headers["X-Queen-Snapshot-Sha256"]
        digest, size = hashlib.sha256(), 0
        length = answer.headers.get("Content-Length")
        bar = open_bar(f"backup {tenant}", int(length) if length and length.isdigit() else None, "B") if open_bar else None
        try:
            with open(part, "wb") as file:
                while chunk := answer.read(CHUNK_BYTES):
                    file.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
                file.flush()
                os.fsync(file.fileno())
        finally:
            if bar is not None:
                bar.close()
        if digest.hexdigest() != expected:
            part.unlink()
            raise BackupRefused(f"{url}: {tenant}'s snapshot arrived damaged (sha256 mismatch)")
        os.replace(part, directory / name)
        return TenantFile(tenant, name, expected, size, int(answer.headers["X-Queen-Applied-Index"]),
                          int(answer.headers["X-Queen-Taken-At"]))


def take_backup(config: ClusterConfig, out: Path, tokens: dict[str, str], context: ssl.SSLContext | None = None,
                progress: Callable[[str], None] = print, open_bar: OpenBar | None = None) -> Path:
    """Writes every tenant's snapshot and the manifest into out (created; must be empty)."""
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise BackupRefused(f"{out} is not empty: back up into a new directory")
    files = []
    for number, tenant in enumerate(config.tenants, 1):
        started = time.monotonic()
        errors = []
        for url in _leader_first(config, tenant.name, context):
            try:
                entry = fetch_tenant(url, tenant.name, tokens[tenant.name], out, context, open_bar)
                break
            except urllib.error.HTTPError as exc:
                errors.append(f"{url}: HTTP {exc.code} {exc.read()[:200].decode('utf-8', 'replace')}")
            except OSError as exc:
                errors.append(f"{url}: {exc}")
        else:
            raise BackupRefused(f"tenant {tenant.name}: no node answered the snapshot: " + "; ".join(errors))
        files.append(entry)
        progress(f"[{number}/{len(config.tenants)}] {tenant.name}: {entry.size} bytes at applied index "
                 f"{entry.applied_index} in {time.monotonic() - started:.1f}s (sha256 {entry.sha256[:12]})")
    path = write_manifest(out, config.name, [node.id for node in config.nodes], files)
    progress(f"backup of {config.name} written: {path}")
    return path
