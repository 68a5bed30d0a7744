"""`queen-raft cluster restore`: seed the empty data dirs of a stopped cluster from a backup.

Every check runs before anything is written, so a refusal changes nothing:
- the manifest is of this format, and names exactly the config's tenants (a backup of other
  tenants, or missing one, is refused);
- every tenant file has the size and sha256 the manifest says (a damaged backup is refused);
- no node to seed answers on its HTTP port (the cluster is stopped), and each of its tenant data
  dirs is absent or empty (restoring over data would fork the log).

Each tenant data dir then gets one `raft.snapshot` in the node's own format (raft/snapshot_file.py)
and nothing else. The snapshot's last two log entries are no-ops at the backup's applied index
(index - 1 and index, term 0), identical on every node: at start a node finds no journal beyond
its fresh one, so it loads the snapshot as its state and raft index (snapshot_reconcile.py,
snapshot_guard.py), and the nodes elect a leader whose log matches theirs. Term 0 is the fresh
journal's term: every election after the restore is in a later term.

`progress` gets one line per tenant seeded (the command's summary); `open_bar(description, total,
unit)`, when given, gets a bar for the checksums (bytes) and one for the seeding (group dirs),
like take.py's.

The node's own attributes in the dump (the first item of its data) are left empty: a SyncObj
only restores the ones it finds, and keeps the defaults it started with for the rest.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj.syncobj import _COMMAND_TYPE, _bchr

from queen_raft.backup.manifest import BackupRefused, TenantFile, read_manifest, sha256_of
from queen_raft.config import ClusterConfig
from queen_raft.raft.construction import FULL_DUMP_FILE_NAME
from queen_raft.raft.snapshot_file import write_snapshot

PORT_PROBE_TIMEOUT_S = 0.5
# The lowest index a seeded snapshot may end at: its previous entry needs index >= 1.
LOWEST_LAST_INDEX = 2


def check_backup(config: ClusterConfig, source: Path, open_bar: Callable[..., Any] | None = None) -> list[TenantFile]:
    manifest, files = read_manifest(source)
    backed_up = {entry.tenant for entry in files}
    configured = {tenant.name for tenant in config.tenants}
    if backed_up != configured:
        raise BackupRefused(
            f"{source} is a backup of tenants {sorted(backed_up)} (cluster {manifest.get('cluster')!r}); "
            f"the config has {sorted(configured)}: restore only into a config with the same tenants")
    for entry in files:
        path = source / entry.file
        if not path.is_file():
            raise BackupRefused(f"{path}: missing (tenant {entry.tenant})")
        if path.stat().st_size != entry.size:
            raise BackupRefused(f"{path}: {path.stat().st_size} bytes, the manifest says {entry.size}: damaged backup")
    bar = open_bar("checking", sum(entry.size for entry in files), "B") if open_bar else None
    try:
        for entry in files:
            path = source / entry.file
            if sha256_of(path, bar.update if bar is not None else None) != entry.sha256:
                raise BackupRefused(f"{path}: sha256 does not match the manifest: damaged backup")
    finally:
        if bar is not None:
            bar.close()
    return files


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PORT_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def check_targets(config: ClusterConfig, node_ids: list[str]) -> None:
    for node_id in node_ids:
        node = config.node(node_id)
        if _answers(node.host, node.http_port):
            raise BackupRefused(f"node {node_id} answers on {node.host}:{node.http_port}: stop the cluster first")
        for tenant in config.tenants:
            directory = config.group_data_dir(node_id, tenant.name)
            if directory.exists() and any(directory.iterdir()):
                raise BackupRefused(f"{directory} is not empty: restore seeds empty data dirs only "
                                    f"(move node {node_id}'s data aside first)")


def seed_dump(state_bytes: bytes, applied_index: int) -> tuple:
    """pysyncobj's dump tuple (data, last entry, previous entry, cluster) holding state_bytes."""
    last_index = max(applied_index, LOWEST_LAST_INDEX)
    no_op = _bchr(_COMMAND_TYPE.NO_OP)
    return [{}, state_bytes], (no_op, last_index, 0), (no_op, last_index - 1, 0), set()


def _write_group_snapshot(directory: Path, dump: tuple) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FULL_DUMP_FILE_NAME
    temporary = directory / (FULL_DUMP_FILE_NAME + ".restoring")
    write_snapshot(str(temporary), dump)
    os.replace(temporary, target)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def restore_backup(config: ClusterConfig, source: Path, node_ids: list[str] | None = None,
                   progress: Callable[[str], None] = print, open_bar: Callable[..., Any] | None = None) -> None:
    """Checks everything (BackupRefused, nothing written), then seeds each node's tenant data dirs."""
    node_ids = node_ids or [node.id for node in config.nodes]
    files = check_backup(config, source, open_bar)
    check_targets(config, node_ids)
    bar = open_bar("seeding", len(files) * len(node_ids), " groups") if open_bar else None
    try:
        for number, entry in enumerate(files, 1):
            dump = seed_dump((source / entry.file).read_bytes(), entry.applied_index)
            for node_id in node_ids:
                _write_group_snapshot(config.group_data_dir(node_id, entry.tenant), dump)
                if bar is not None:
                    bar.update(1)
            progress(f"[{number}/{len(files)}] {entry.tenant}: seeded {', '.join(node_ids)} at applied index "
                     f"{entry.applied_index} ({entry.size} bytes)")
    finally:
        if bar is not None:
            bar.close()
    progress(f"restore of {config.name} done: start the nodes")
