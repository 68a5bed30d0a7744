"""cluster backup's refusals before it asks any node: tokens, and the target directory."""

from __future__ import annotations

import hashlib

import pytest

from queen_raft.backup.manifest import BackupRefused
from queen_raft.backup.take import admin_tokens, take_backup
from queen_raft.cli.main import main
from queen_raft.config import load_config
from test_backup_restore import write_config


def test_a_dev_configs_plaintext_admin_tokens_are_used_and_a_given_token_wins(tmp_path):
    config = load_config(write_config(tmp_path))
    assert admin_tokens(config, {}) == {"acme": "acme-admin", "globex": "globex-admin"}
    assert admin_tokens(config, {"globex": "other"}) == {"acme": "acme-admin", "globex": "other"}


def test_a_token_for_a_tenant_not_in_the_config_is_refused(tmp_path):
    config = load_config(write_config(tmp_path))
    with pytest.raises(BackupRefused, match="not in the config: initech"):
        admin_tokens(config, {"initech": "x"})


def test_a_tenant_without_a_known_token_is_named(tmp_path):
    path = write_config(tmp_path)
    digest = hashlib.sha256(b"globex-admin").hexdigest()
    path.write_text(path.read_text().replace('token = "globex-admin"', f'token_sha256 = "{digest}"'))
    config = load_config(path)
    with pytest.raises(BackupRefused, match=r"no admin token for tenant\(s\) globex: give --token TENANT=TOKEN"):
        admin_tokens(config, {})


def test_a_non_empty_out_directory_is_refused_before_any_call(tmp_path):
    config = load_config(write_config(tmp_path))
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    with pytest.raises(BackupRefused, match="is not empty: back up into a new directory"):
        take_backup(config, out, admin_tokens(config, {}), progress=lambda line: None)
    assert (out / "manifest.json").read_text() == "{}"


def test_the_cli_refuses_a_malformed_token_pair_with_exit_65(tmp_path, capsys):
    path = write_config(tmp_path)
    assert main(["cluster", "backup", "--config", str(path), "--out", str(tmp_path / "out"), "--token", "acme"]) == 65
    assert "backup refused: --token 'acme': expected TENANT=TOKEN" in capsys.readouterr().err
