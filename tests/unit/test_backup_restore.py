"""cluster restore: what it writes into empty data dirs, and each refusal, which changes nothing."""

from __future__ import annotations

import json
import socket

import pytest

from queen_raft.backup.manifest import BackupRefused, TenantFile, sha256_of, write_manifest
from queen_raft.backup.restore import restore_backup
from queen_raft.cli.main import main
from queen_raft.config import load_config
from queen_raft.raft.construction import FULL_DUMP_FILE_NAME
from queen_raft.raft.snapshot_file import read_snapshot
from queen_raft.state import TenantState

TENANTS = ("acme", "globex")
APPLIED_INDEX = 4711


def _closed_ports(count: int) -> list[int]:
    """Ports nothing listens on (bound, then released): the "cluster is stopped" check passes."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def write_config(directory, tenants=TENANTS, http_ports=None):
    http_ports = http_ports or _closed_ports(3)
    lines = ["[cluster]", 'name = "restore-test"', f'data_dir = "{directory / "data"}"', ""]
    for number, port in enumerate(http_ports, 1):
        lines += ["[[nodes]]", f'id = "n{number}"', 'host = "127.0.0.1"', f"http_port = {port}",
                  f"raft_port = {21000 + 100 * number}", ""]
    for tenant in tenants:
        lines += ["[[tenants]]", f'name = "{tenant}"', "[[tenants.tokens]]", f'token = "{tenant}-admin"',
                  'level = "admin"', ""]
    lines += ["[settings]", 'raft_password = "a-test-password-of-enough-length"']
    path = directory / "cluster.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_backup(directory, tenants=TENANTS):
    directory.mkdir()
    files = []
    for tenant in tenants:
        data = TenantState().snapshot()
        (directory / f"{tenant}.snapshot").write_bytes(data)
        files.append(TenantFile(tenant, f"{tenant}.snapshot", sha256_of(directory / f"{tenant}.snapshot"),
                                len(data), APPLIED_INDEX, 1_767_225_600_000))
    write_manifest(directory, "restore-test", ["n1", "n2", "n3"], files)
    return directory


@pytest.fixture
def setup(tmp_path):
    return load_config(write_config(tmp_path)), write_backup(tmp_path / "backup"), tmp_path


def test_restore_seeds_every_node_with_a_snapshot_the_node_loads(setup):
    config, backup, _ = setup
    restore_backup(config, backup, progress=lambda line: None)
    for node in config.nodes:
        for tenant in TENANTS:
            directory = config.group_data_dir(node.id, tenant)
            assert sorted(p.name for p in directory.iterdir()) == [FULL_DUMP_FILE_NAME]
            data, last, prev, _ = read_snapshot(str(directory / FULL_DUMP_FILE_NAME))
            assert data[1] == (backup / f"{tenant}.snapshot").read_bytes()
            assert (last[1], prev[1], last[2], prev[2]) == (APPLIED_INDEX, APPLIED_INDEX - 1, 0, 0)
            assert TenantState.restore(data[1]).snapshot() == TenantState().snapshot()


def _nothing_written(config) -> bool:
    return not config.data_dir.exists()


def test_a_damaged_backup_file_is_refused_and_nothing_is_written(setup):
    config, backup, _ = setup
    damaged = bytearray((backup / "globex.snapshot").read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    (backup / "globex.snapshot").write_bytes(bytes(damaged))
    with pytest.raises(BackupRefused, match="sha256 does not match the manifest: damaged backup"):
        restore_backup(config, backup, progress=lambda line: None)
    assert _nothing_written(config)


def test_a_truncated_backup_file_is_refused(setup):
    config, backup, _ = setup
    (backup / "acme.snapshot").write_bytes((backup / "acme.snapshot").read_bytes()[:-1])
    with pytest.raises(BackupRefused, match="the manifest says"):
        restore_backup(config, backup, progress=lambda line: None)
    assert _nothing_written(config)


def test_a_backup_of_other_tenants_is_refused(tmp_path):
    config = load_config(write_config(tmp_path, tenants=("acme", "initech")))
    backup = write_backup(tmp_path / "backup")
    with pytest.raises(BackupRefused, match=r"backup of tenants \['acme', 'globex'\].*the config has \['acme', 'initech'\]"):
        restore_backup(config, backup, progress=lambda line: None)
    assert _nothing_written(config)


def test_a_non_empty_data_dir_is_refused_and_no_node_is_seeded(setup):
    config, backup, _ = setup
    occupied = config.group_data_dir("n3", "globex")
    occupied.mkdir(parents=True)
    (occupied / "raft.journal").write_bytes(b"old")
    with pytest.raises(BackupRefused, match="is not empty"):
        restore_backup(config, backup, progress=lambda line: None)
    assert sorted(p.name for p in config.data_dir.rglob("*")) == ["globex", "n3", "raft.journal"]
    assert (occupied / "raft.journal").read_bytes() == b"old"


def test_a_running_node_is_refused(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        config = load_config(write_config(tmp_path, http_ports=[listener.getsockname()[1], *_closed_ports(2)]))
        backup = write_backup(tmp_path / "backup")
        with pytest.raises(BackupRefused, match="node n1 answers on .*: stop the cluster first"):
            restore_backup(config, backup, progress=lambda line: None)
    assert _nothing_written(config)


def test_a_directory_without_a_manifest_is_refused(setup):
    config, backup, _ = setup
    (backup / "manifest.json").unlink()
    with pytest.raises(BackupRefused, match="no manifest: not a backup directory"):
        restore_backup(config, backup, progress=lambda line: None)


def test_the_cli_says_what_was_refused_and_exits_65(setup, capsys):
    config, backup, tmp_path = setup
    manifest = json.loads((backup / "manifest.json").read_text())
    manifest["tenants"]["acme"]["sha256"] = "0" * 64
    (backup / "manifest.json").write_text(json.dumps(manifest))
    code = main(["cluster", "restore", "--config", str(tmp_path / "cluster.toml"), "--from", str(backup)])
    assert code == 65
    assert "restore refused, nothing changed:" in capsys.readouterr().err
    assert _nothing_written(config)
