"""Every node has a Raft password: where it is found, the refusal without one, and the dev file
`cluster up` writes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from queen_raft.config import ConfigError, parse_config
from queen_raft.peer_password import (
    DEV_PASSWORD_FILE_NAME,
    ensure_dev_raft_password,
    resolve_raft_password,
)


def config_in(tmp_path: Path, host: str = "127.0.0.1", settings: dict | None = None, env: dict | None = None):
    raw = {
        "cluster": {"name": "c", "data_dir": str(tmp_path / "data")},
        "nodes": [{"id": "n1", "host": host, "http_port": 6632, "raft_port": 7400}],
        "tenants": [{"name": "acme", "tokens": [{"token_sha256": "a" * 64, "level": "admin"}]}],
        "settings": settings or {},
    }
    return parse_config(raw, env=env or {})


def test_a_loopback_config_without_any_password_is_refused_at_node_start(tmp_path):
    with pytest.raises(ConfigError) as refused:
        resolve_raft_password(config_in(tmp_path))
    message = str(refused.value)
    assert "no Raft password" in message
    for named in ("raft_password", "raft_password_file", "QUEEN_RAFT_PASSWORD", "QUEEN_RAFT_PASSWORD_FILE",
                  str(tmp_path / "data" / DEV_PASSWORD_FILE_NAME)):
        assert named in message


def test_an_empty_password_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="raft_password is empty"):
        resolve_raft_password(config_in(tmp_path, settings={"raft_password": "  "}))


def test_the_password_setting_and_its_variable_win(tmp_path):
    assert resolve_raft_password(config_in(tmp_path, settings={"raft_password": "a"})).settings.raft_password == "a"
    config = config_in(tmp_path, settings={"raft_password": "a"}, env={"QUEEN_RAFT_PASSWORD": "b"})
    assert resolve_raft_password(config).settings.raft_password == "b"


def test_a_password_file_is_read_stripped(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("  from-file\n")
    config = config_in(tmp_path, env={"QUEEN_RAFT_PASSWORD_FILE": str(secret)})
    assert resolve_raft_password(config).settings.raft_password == "from-file"


@pytest.mark.parametrize("content", [None, "", "\n"])
def test_a_missing_or_empty_password_file_is_refused(tmp_path, content):
    secret = tmp_path / "secret"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(ConfigError, match=str(secret)):
        resolve_raft_password(config_in(tmp_path, settings={"raft_password_file": str(secret)}))


def test_the_dev_file_in_the_data_dir_is_found(tmp_path):
    config = config_in(tmp_path)
    path = ensure_dev_raft_password(config)
    assert path == tmp_path / "data" / DEV_PASSWORD_FILE_NAME
    assert resolve_raft_password(config).settings.raft_password == path.read_text().strip()


def test_cluster_up_writes_a_random_password_once_mode_0600(tmp_path):
    config = config_in(tmp_path)
    path = ensure_dev_raft_password(config)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text().strip()
    assert len(first) >= 40
    assert ensure_dev_raft_password(config) == path and path.read_text().strip() == first
    assert [p.name for p in path.parent.iterdir()] == [DEV_PASSWORD_FILE_NAME]  # no temporary file left
    other = config_in(tmp_path / "other")
    assert ensure_dev_raft_password(other).read_text().strip() != first


def test_cluster_up_writes_nothing_when_the_config_names_a_password(tmp_path):
    assert ensure_dev_raft_password(config_in(tmp_path, settings={"raft_password": "x"})) is None
    assert ensure_dev_raft_password(config_in(tmp_path, env={"QUEEN_RAFT_PASSWORD_FILE": "/nonexistent"})) is None
    assert not (tmp_path / "data").exists()


def test_a_non_loopback_config_may_name_its_password_by_file(tmp_path):
    with pytest.raises(ConfigError, match="raft_password_file"):
        config_in(tmp_path, host="10.0.0.5")
    config = config_in(tmp_path, host="10.0.0.5", settings={"raft_password_file": "/run/secrets/raft"})
    assert config.settings.raft_password_file == "/run/secrets/raft"


def test_the_handshake_timeout_setting(tmp_path):
    assert config_in(tmp_path).settings.raft_handshake_timeout_s == 5.0
    config = config_in(tmp_path, env={"QUEEN_RAFT_HANDSHAKE_TIMEOUT_S": "2.5"})
    assert config.settings.raft_handshake_timeout_s == 2.5
    with pytest.raises(ConfigError, match="raft_handshake_timeout_s"):
        config_in(tmp_path, settings={"raft_handshake_timeout_s": 0})
