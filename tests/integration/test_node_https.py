"""HTTPS on loopback: three nodes with a certificate from a test CA (tls_certs.py).

The SDK and the CLI reach them with the CA file and refuse them without it; plain HTTP gets no
answer on the HTTPS port; the nodes' own calls to one another (the overview's peer /health) and
`cluster status` go over HTTPS too.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from cluster_fixture import REPO, NodeCluster, token
from tls_certs import make_certificates
from queen_raft.client import ConnectionFailed, Queen, RetryPolicy
from queen_raft.client.tls import client_ssl_context


HEADER_TIMEOUT_S = 1.0


class HttpsCluster(NodeCluster):
    def url(self, node_id: str) -> str:
        return f"https://127.0.0.1:{self.http_ports[node_id]}"


@pytest.fixture(scope="module")
def https_cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("https")
    cafile, certs = make_certificates(directory / "tls", {"loopback": "127.0.0.1"})
    # The fixture's own calls (urllib.request.urlopen) trust the test CA through this opener; the
    # node processes get nothing of it, so their peer calls trust the CA only through QUEEN_CACERT.
    urllib.request.install_opener(urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=client_ssl_context(str(cafile)))))
    cluster = HttpsCluster(directory, settings={"http_tls_cert": str(certs["loopback"].cert),
                                                "http_tls_key": str(certs["loopback"].key),
                                                "http_header_timeout_s": HEADER_TIMEOUT_S},
                           env={"QUEEN_CACERT": str(cafile)})
    try:
        cluster.start()
        yield cluster, cafile
    finally:
        codes = cluster.stop()
        urllib.request.install_opener(None)
        assert all(code == 0 for code in codes.values()), codes


def test_the_sdk_schedules_and_pops_over_https_with_the_ca_file(https_cluster):
    cluster, cafile = https_cluster

    async def run() -> list:
        urls = [cluster.url(n) for n in cluster.node_ids]
        async with Queen(urls=urls, token=token("acme", "read-write"), cafile=str(cafile)) as queen:
            await queen.timer("https-q").key("k").delay("100ms").payload({"over": "tls"}).schedule()
            return await queen.pop("https-q", wait="5s", auto_ack=True)

    messages = asyncio.run(run())
    assert [m.payload for m in messages] == [{"over": "tls"}]


def test_the_sdk_refuses_a_node_its_ca_does_not_vouch_for(https_cluster, monkeypatch):
    cluster, _ = https_cluster
    monkeypatch.delenv("QUEEN_CACERT", raising=False)

    async def run() -> None:
        async with Queen(urls=[cluster.url("n1")], token=token("acme", "read-write"),
                         retry=RetryPolicy(budget_s=2.0)) as queen:
            await queen.push("refused-q", {"n": 1})

    with pytest.raises(ConnectionFailed) as failed:
        asyncio.run(run())
    assert "certificate" in str(failed.value.wire_body()).lower()


def test_plain_http_gets_no_answer_on_the_https_port(https_cluster):
    cluster, _ = https_cluster
    plain = f"http://127.0.0.1:{cluster.http_ports['n1']}/health"
    with pytest.raises(OSError):  # the TLS server closes on a request that is not a handshake
        urllib.request.urlopen(plain, timeout=5)


def test_cluster_status_without_the_ca_reaches_no_node(https_cluster):
    cluster, _ = https_cluster
    env = {k: v for k, v in os.environ.items() if k != "QUEEN_CACERT"}
    result = subprocess.run([sys.executable, "-m", "queen_raft", "cluster", "status", "--config", str(cluster.config_path)],
                            capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 1 and result.stdout.count("no answer from https://") == 3, result.stdout


def test_the_cli_pops_with_cacert(https_cluster):
    cluster, cafile = https_cluster
    status, _, _ = cluster.call("n1", "POST", "/api/v1/push", token("acme", "read-write"),
                                {"items": [{"queue": "cli-q", "transactionId": "t-cli", "payload": {"n": 1}}]})
    assert status == 201
    env = {k: v for k, v in os.environ.items() if k != "QUEEN_CACERT"}
    args = [sys.executable, "-m", "queen_raft", "pop", "cli-q", "--url", cluster.url("n2"), "--token",
            token("acme", "read-write"), "--auto-ack", "-o", "json", "--retry-budget", "2"]
    refused = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert refused.returncode != 0 and "certificate" in refused.stderr.lower(), refused.stderr
    popped = subprocess.run(args + ["--cacert", str(cafile)], capture_output=True, text=True, cwd=REPO, env=env,
                            timeout=60)
    assert popped.returncode == 0, popped.stderr
    assert [m["payload"] for m in json.loads(popped.stdout)["messages"]] == [{"n": 1}]


def test_the_overview_reaches_every_peer_over_https(https_cluster):
    cluster, _ = https_cluster
    status, _, body = cluster.call("n1", "GET", "/api/v1/overview", token("acme", "read-only"))
    assert status == 200, body
    assert {(n["node"], n["url"].split(":")[0], n["reachable"]) for n in body["nodes"]} == {
        (node_id, "https", True) for node_id in cluster.node_ids}


@pytest.mark.parametrize("ca_by", ["--cacert", "QUEEN_CACERT"])
def test_cluster_status_polls_the_nodes_over_https(https_cluster, ca_by):
    cluster, cafile = https_cluster
    env = {k: v for k, v in os.environ.items() if k != "QUEEN_CACERT"}
    args = [sys.executable, "-m", "queen_raft", "cluster", "status", "--config", str(cluster.config_path)]
    if ca_by == "--cacert":
        args += ["--cacert", str(cafile)]
    else:
        env["QUEEN_CACERT"] = str(cafile)
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no answer" not in result.stdout and "leader" in result.stdout, result.stdout
    assert all(node_id in result.stdout for node_id in cluster.node_ids)


def test_client_ssl_context_takes_the_ca_from_the_environment(https_cluster, monkeypatch):
    cluster, cafile = https_cluster
    monkeypatch.setenv("QUEEN_CACERT", str(cafile))
    with urllib.request.urlopen(f"{cluster.url('n3')}/health", timeout=5, context=client_ssl_context()) as answer:
        assert answer.status == 200


def test_a_connection_that_never_completes_its_tls_handshake_is_closed_after_the_header_timeout(https_cluster):
    """asyncio would hold it 60 s, and aiohttp's own timers start only after the handshake."""
    cluster, _ = https_cluster
    with socket.create_connection(("127.0.0.1", cluster.http_ports["n1"]), timeout=30) as silent:
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the node
        waited = time.monotonic() - started
    assert HEADER_TIMEOUT_S * 0.5 <= waited < HEADER_TIMEOUT_S + 5, waited


def test_the_openapi_document_names_the_https_address_it_was_fetched_from(https_cluster):
    cluster, _ = https_cluster
    status, _, document = cluster.call("n2", "GET", "/api/v1/openapi.json")
    assert status == 200
    assert document["servers"] == [{"url": cluster.url("n2")}]
