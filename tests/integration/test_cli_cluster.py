"""`queen-raft timer|push|pop|kv` as a subprocess against three real nodes: JSON out, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from cluster_fixture import REPO, node_cluster, token  # noqa: F401  (node_cluster is a fixture)

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
WO = token("acme", "write-only")
# The interpreter and aiohttp import in well under a second; the rest is a loaded machine.
CLI_TIMEOUT_S = 30


def cli(cluster, *args: str, token_text: str = RW, env_urls: bool = False) -> subprocess.CompletedProcess:
    """Runs `python -m queen_raft <args>`; nodes by --url, or by QUEEN_URL/QUEEN_TOKEN with env_urls."""
    env = {k: v for k, v in os.environ.items() if k not in ("QUEEN_URL", "QUEEN_TOKEN")}
    urls = [cluster.url(n) for n in cluster.node_ids]
    if env_urls:
        env.update(QUEEN_URL=",".join(urls), QUEEN_TOKEN=token_text)
        extra: list[str] = []
    else:
        extra = [part for url in urls for part in ("--url", url)] + ["--token", token_text]
    return subprocess.run([sys.executable, "-m", "queen_raft", *args, *extra], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def answer(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def test_schedule_peek_cancel_with_exit_codes(node_cluster):
    queue, key = f"cli-{uuid.uuid4().hex[:8]}", "order/9137"
    scheduled = answer(cli(node_cluster, "timer", "schedule", queue, key, "--delay", "24h", "--txn", "remind-9137",
                           "--payload", '{"orderId": 9137}'))
    assert (scheduled["ok"], scheduled["status"], scheduled["txn"]) == (True, "scheduled", "remind-9137")

    peeked = answer(cli(node_cluster, "timer", "peek", queue, key, env_urls=True))
    assert (peeked["found"], peeked["txn"], peeked["deliverAt"]) == (True, "remind-9137", scheduled["deliverAt"])
    assert peeked["payload"] == "eyJvcmRlcklkIjo5MTM3fQ=="  # the wire's base64 of {"orderId":9137}

    listed = answer(cli(node_cluster, "timer", "list", queue, "--all"))
    assert [row["timerKey"] for row in listed["rows"]] == [key]

    refused = cli(node_cluster, "timer", "cancel", queue, key, token_text=WO)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert json.loads(refused.stderr.strip().splitlines()[-1])["error"] == "forbidden"

    cancelled = answer(cli(node_cluster, "timer", "cancel", queue, key, "--txn", "remind-9137"))
    assert (cancelled["ok"], cancelled["status"], cancelled["txn"]) == (True, "cancelled", "remind-9137")
    assert answer(cli(node_cluster, "timer", "peek", queue, key))["found"] is False
    absent = answer(cli(node_cluster, "timer", "cancel", queue, key))
    assert (absent["ok"], absent["status"]) == (False, "absent")


def test_push_pop_kv_and_refusals(node_cluster):
    queue, ns = f"cli-{uuid.uuid4().hex[:8]}", f"ns-{uuid.uuid4().hex[:8]}"
    pushed = answer(cli(node_cluster, "push", queue, "--payload", '{"n": 1}', "--txn", "p-1"))
    assert (pushed["status"], pushed["transactionId"]) == ("queued", "p-1")
    popped = answer(cli(node_cluster, "pop", queue, "--group", "g", "--wait", "2s", "--ack"))
    assert [(m["transactionId"], m["payload"]) for m in popped["messages"]] == [("p-1", {"n": 1})]
    assert answer(cli(node_cluster, "pop", queue, "--group", "g"))["messages"] == []  # acked

    put = answer(cli(node_cluster, "kv", "put", ns, "a", '{"state": "held"}', "--ttl", "7d"))
    assert (put["version"], put["value"]) == (1, {"state": "held"})
    assert answer(cli(node_cluster, "kv", "get", ns, "a"))["value"] == {"state": "held"}

    horizon = cli(node_cluster, "timer", "schedule", queue, "k", "--delay", "91d", "--payload", "1")
    assert horizon.returncode == 1 and json.loads(horizon.stderr.strip().splitlines()[-1])["error"] == "timer_horizon_exceeded"
    bad_duration = cli(node_cluster, "timer", "schedule", queue, "k", "--delay", "soon", "--payload", "1")
    assert bad_duration.returncode == 2 and bad_duration.stdout == ""
    unauthorized = cli(node_cluster, "kv", "get", ns, "a", token_text="nobody")
    assert unauthorized.returncode == 1 and '"unauthorized"' in unauthorized.stderr
