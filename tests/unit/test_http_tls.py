"""The HTTP TLS rule at start (queen_raft/http_tls.py): off loopback, HTTPS or an explicit opt-out."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queen_raft.client.tls import client_ssl_context
from queen_raft.config import parse_config
from queen_raft.http_tls import EXIT_CONFIG, TlsConfigError, check_http_tls, server_ssl_context

REPO = Path(__file__).resolve().parents[2]


def config(host: str = "10.0.0.1", **settings) -> dict:
    return {
        "cluster": {"name": "t", "data_dir": "data/q"},
        "nodes": [{"id": "n1", "host": host, "http_port": 6632, "raft_port": 7400},
                  {"id": "n2", "host": "127.0.0.1" if host == "127.0.0.1" else "10.0.0.2", "http_port": 6633, "raft_port": 7500}],
        "tenants": [{"name": "acme", "tokens": [{"token_sha256": hashlib.sha256(b"t").hexdigest(), "level": "admin"}]}],
        "settings": {"raft_password": "pw", **settings},
    }


def test_a_config_off_loopback_without_tls_is_refused_naming_tls_and_both_settings():
    with pytest.raises(TlsConfigError) as refused:
        check_http_tls(parse_config(config(), env={}))
    message = str(refused.value)
    assert "TLS" in message and "http_tls_cert" in message and "http_tls_key" in message
    assert "10.0.0.1" in message and "allow_plaintext_http" in message


def test_loopback_configs_serve_plain_http():
    loopback = parse_config(config(host="127.0.0.1"), env={})
    check_http_tls(loopback)
    assert server_ssl_context(loopback) is None
    assert loopback.nodes[0].http_url == "http://127.0.0.1:6632"


def test_allow_plaintext_http_starts_with_a_warning(caplog):
    allowed = parse_config(config(allow_plaintext_http=True), env={})
    with caplog.at_level(logging.WARNING, logger="queen_raft.http_tls"):
        check_http_tls(allowed)
    assert any("cleartext" in record.getMessage() and record.levelno == logging.WARNING for record in caplog.records)


def test_allow_plaintext_http_from_the_environment():
    assert parse_config(config(), env={"QUEEN_ALLOW_PLAINTEXT_HTTP": "true"}).settings.allow_plaintext_http is True
    with pytest.raises(ValueError, match="QUEEN_ALLOW_PLAINTEXT_HTTP"):
        parse_config(config(), env={"QUEEN_ALLOW_PLAINTEXT_HTTP": "perhaps"})


def test_the_tls_settings_come_from_the_environment_and_make_the_urls_https():
    parsed = parse_config(config(), env={"QUEEN_HTTP_TLS_CERT": "/c.pem", "QUEEN_HTTP_TLS_KEY": "/k.pem"})
    assert (parsed.settings.http_tls_cert, parsed.settings.http_tls_key) == ("/c.pem", "/k.pem")
    assert [n.http_url for n in parsed.nodes] == ["https://10.0.0.1:6632", "https://10.0.0.2:6633"]
    check_http_tls(parsed)


def test_a_certificate_without_its_key_is_refused():
    with pytest.raises(TlsConfigError, match="both http_tls_cert and http_tls_key"):
        check_http_tls(parse_config(config(http_tls_cert="/c.pem"), env={}))


def test_an_unreadable_certificate_is_refused_naming_the_settings(tmp_path):
    parsed = parse_config(config(http_tls_cert=str(tmp_path / "no.pem"), http_tls_key=str(tmp_path / "no.key")), env={})
    with pytest.raises(TlsConfigError, match="http_tls_cert"):
        server_ssl_context(parsed)


def _run_node(tmp_path: Path, settings: str) -> subprocess.CompletedProcess:
    digest = hashlib.sha256(b"t").hexdigest()
    path = tmp_path / "cluster.toml"
    path.write_text(f'[cluster]\nname = "t"\ndata_dir = "{tmp_path / "data"}"\n\n'
                    '[[nodes]]\nid = "n1"\nhost = "10.0.0.1"\nhttp_port = 6632\nraft_port = 7400\n\n'
                    f'[[tenants]]\nname = "acme"\n[[tenants.tokens]]\ntoken_sha256 = "{digest}"\nlevel = "admin"\n\n'
                    f'[settings]\nraft_password = "pw"\n{settings}\n')
    return subprocess.run([sys.executable, "-m", "queen_raft", "node", "--config", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_the_node_exits_78_off_loopback_without_tls(tmp_path):
    result = _run_node(tmp_path, "")
    assert result.returncode == EXIT_CONFIG == 78, result.stderr
    assert "TLS" in result.stderr and "http_tls_cert" in result.stderr and "http_tls_key" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_the_node_exits_78_when_its_certificate_cannot_be_loaded(tmp_path):
    result = _run_node(tmp_path, f'http_tls_cert = "{tmp_path}/no.pem"\nhttp_tls_key = "{tmp_path}/no.key"')
    assert result.returncode == 78, result.stderr
    assert "cannot load the HTTP TLS certificate" in result.stderr


def test_a_ca_file_that_cannot_be_read_is_a_value_error_naming_it(tmp_path, monkeypatch):
    (tmp_path / "junk.pem").write_text("not a certificate")
    for bad in (tmp_path / "missing.pem", tmp_path / "junk.pem"):
        with pytest.raises(ValueError, match=f"cannot use the CA file {bad}"):
            client_ssl_context(str(bad))
    monkeypatch.setenv("QUEEN_CACERT", str(tmp_path / "missing.pem"))
    with pytest.raises(ValueError, match="QUEEN_CACERT"):
        client_ssl_context()


@pytest.mark.parametrize("how", ["--cacert", "QUEEN_CACERT"])
def test_the_cli_refuses_a_ca_file_it_cannot_read_with_exit_2(tmp_path, how):
    missing = str(tmp_path / "missing.pem")
    args = [sys.executable, "-m", "queen_raft", "cluster", "status", "--config", str(REPO / "cluster_configs" / "local-3.toml")]
    env = {k: v for k, v in os.environ.items() if k != "QUEEN_CACERT"}
    if how == "--cacert":
        args += ["--cacert", missing]
    else:
        env["QUEEN_CACERT"] = missing
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"cannot use the CA file {missing}" in result.stderr and "Traceback" not in result.stderr
