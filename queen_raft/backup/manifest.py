"""manifest.json of a backup directory: what was backed up, and the checksums that prove it intact."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
FORMAT = "queen-raft-backup"
FORMAT_VERSION = 1
HASH_CHUNK_BYTES = 1 << 20


class BackupRefused(Exception):
    """The backup or the target cannot be used; nothing was changed."""


@dataclass(frozen=True)
class TenantFile:
    tenant: str
    file: str
    sha256: str
    size: int
    applied_index: int
    taken_at_ms: int

    def to_json(self) -> dict:
        return {"file": self.file, "sha256": self.sha256, "bytes": self.size,
                "appliedIndex": self.applied_index, "takenAtMs": self.taken_at_ms}


def snapshot_file_name(tenant: str) -> str:
    return f"{tenant}.snapshot"


def sha256_of(path: Path, on_chunk: Callable[[int], Any] | None = None) -> str:
    """The file's hex sha256; `on_chunk(n)` after each n bytes read (a progress bar's update)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return digest.hexdigest()


def write_manifest(directory: Path, cluster: str, node_ids: list[str], files: list[TenantFile]) -> Path:
    manifest = {
        "format": FORMAT, "formatVersion": FORMAT_VERSION, "cluster": cluster, "nodes": node_ids,
        "tenants": {entry.tenant: entry.to_json() for entry in files},
    }
    path = directory / MANIFEST_NAME
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    with open(temporary, "rb") as file:
        os.fsync(file.fileno())
    os.replace(temporary, path)
    return path


def read_manifest(directory: Path) -> tuple[dict, list[TenantFile]]:
    """The manifest and its tenant files; BackupRefused when it is missing or not of this format."""
    path = directory / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BackupRefused(f"{path}: no manifest: not a backup directory") from None
    except (OSError, ValueError) as exc:
        raise BackupRefused(f"{path}: the manifest cannot be read ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupRefused(f"{path}: not a queen-raft backup manifest")
    if manifest.get("formatVersion") != FORMAT_VERSION:
        raise BackupRefused(f"{path}: backup format version {manifest.get('formatVersion')!r}; this "
                            f"version reads {FORMAT_VERSION}")
    try:
        files = [TenantFile(tenant, entry["file"], entry["sha256"], int(entry["bytes"]),
                            int(entry["appliedIndex"]), int(entry["takenAtMs"]))
                 for tenant, entry in sorted(manifest["tenants"].items())]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BackupRefused(f"{path}: the manifest's tenants are malformed ({exc})") from None
    for entry in files:
        if os.path.basename(entry.file) != entry.file:
            raise BackupRefused(f"{path}: tenant {entry.tenant}'s file {entry.file!r} is not a plain file name")
    return manifest, files
