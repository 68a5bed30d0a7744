"""`queen-raft` client commands as a subprocess against three real nodes: JSON out, exit codes.

The data commands (timer, push, pop, kv) and the operator ones: a timer that fails permanently in
the DLQ and its refused replay, pause/resume, configure, usage, and transactions from a file."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from cluster_fixture import REPO, running_cluster, token

pytestmark = pytest.mark.integration

RW = token("acme", "read-write")
WO = token("acme", "write-only")
ADMIN = token("acme", "admin")
# The pause test pauses globex, so that no other test of the module meets a paused tenant.
PAUSED_RW = token("globex", "read-write")
PAUSED_ADMIN = token("globex", "admin")
# The interpreter and aiohttp import in well under a second; the rest is a loaded machine.
CLI_TIMEOUT_S = 30
# A timer's first permanent failure files it in the DLQ (the default, 5 tries over 1+2+4+8 s of
# backoff, would only make the test wait).
FIRE_MAX_ATTEMPTS = 1
# A due timer fires at the next leader tick (50 ms); a loaded machine may take a few seconds.
FIRE_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.1
GARBAGE_ZSTD = base64.b64encode(b"not zstd at all").decode()


@pytest.fixture(scope="module")
def node_cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cli"), settings={"timer_fire_max_attempts": FIRE_MAX_ATTEMPTS}) as cluster:
        yield cluster


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


def refusal(done: subprocess.CompletedProcess) -> dict:
    """The error body of a command that exited 1 with nothing on stdout."""
    assert (done.returncode, done.stdout) == (1, ""), (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stderr.strip().splitlines()[-1])


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


def test_cancel_and_peek_after_the_fire_print_where_the_message_went(node_cluster):
    queue = f"cli-{uuid.uuid4().hex[:8]}"
    scheduled = answer(cli(node_cluster, "timer", "schedule", queue, "due", "--delay", "0", "--txn", "fire-now",
                           "--payload", '{"n": 1}'))  # due at its entry: fires in it
    fired = answer(cli(node_cluster, "timer", "cancel", queue, "due", "--txn", "mine"))
    assert (fired["ok"], fired["status"], fired["txn"], fired["partition"], fired["offset"], fired["messageId"],
            fired["requestTxn"]) == (False, "fired", "fire-now", "Default", 0, scheduled["messageId"], "mine")
    peeked = answer(cli(node_cluster, "timer", "peek", queue, "due"))
    assert (peeked["found"], peeked["status"], peeked["offset"], peeked["firedAt"]) == (
        False, "fired", 0, fired["firedAt"])


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


def test_a_timer_that_fails_permanently_is_in_the_dlq_and_its_replay_exits_1(node_cluster, tmp_path):
    queue = f"cli-dlq-{uuid.uuid4().hex[:8]}"
    body = tmp_path / "bad-timer.json"
    body.write_text(json.dumps({"timers": [{"op": "schedule", "queue": queue, "timerKey": "bad", "delayMs": 0,
                                            "txn": "t-bad", "payload": GARBAGE_ZSTD, "payloadZstd": True}]}))
    assert answer(cli(node_cluster, "transaction", "--file", str(body)))["success"] is True
    first = node_cluster.node_ids[0]
    deadline = time.monotonic() + FIRE_TIMEOUT_S
    while not node_cluster.call(first, "GET", f"/api/v1/dlq?queue={queue}", RW)[2]["rows"]:
        assert time.monotonic() < deadline, "the failing timer was not filed in the DLQ"
        time.sleep(POLL_INTERVAL_S)

    listed = answer(cli(node_cluster, "dlq", "list", queue, "--group", "__timer__"))
    (row,) = listed["rows"]
    assert (row["timerKey"], row["offset"], row["transactionId"], row["attempts"]) == ("bad", -1, "t-bad", 1)
    assert listed["truncated"] is False
    assert refusal(cli(node_cluster, "dlq", "replay", row["dlqId"]))["error"] == "dlq_replay_refused"
    assert [r["dlqId"] for r in answer(cli(node_cluster, "dlq", "list", queue))["rows"]] == [row["dlqId"]]
    assert answer(cli(node_cluster, "timer", "peek", queue, "bad"))["found"] is False


def test_pause_refuses_schedules_while_cancel_works_and_resume_lifts_it(node_cluster):
    queue = f"cli-pause-{uuid.uuid4().hex[:8]}"
    answer(cli(node_cluster, "timer", "schedule", queue, "k1", "--delay", "1h", "--payload", "1", token_text=PAUSED_RW))
    assert refusal(cli(node_cluster, "admin", "pause", token_text=PAUSED_RW))["error"] == "forbidden"
    try:
        assert answer(cli(node_cluster, "admin", "pause", token_text=PAUSED_ADMIN)) == {"tenant": "globex", "paused": True}
        paused = refusal(cli(node_cluster, "timer", "schedule", queue, "k2", "--delay", "1h", "--payload", "1",
                             token_text=PAUSED_RW))
        assert (paused["error"], paused["reason"]) == ("timers_disabled", "paused")
        cancelled = answer(cli(node_cluster, "timer", "cancel", queue, "k1", token_text=PAUSED_RW))
        assert (cancelled["ok"], cancelled["status"]) == (True, "cancelled")
        assert answer(cli(node_cluster, "usage", token_text=PAUSED_ADMIN))["schedulingPaused"] is True
        assert answer(cli(node_cluster, "usage", token_text=ADMIN))["schedulingPaused"] is False  # acme goes on
    finally:
        resumed = cli(node_cluster, "admin", "resume", token_text=PAUSED_ADMIN)
    assert answer(resumed) == {"tenant": "globex", "paused": False}
    scheduled = answer(cli(node_cluster, "timer", "schedule", queue, "k2", "--delay", "1h", "--payload", "1",
                           token_text=PAUSED_RW))
    assert scheduled["status"] == "scheduled"


def test_configure_then_a_push_over_the_new_limit_is_refused(node_cluster):
    queue = f"cli-conf-{uuid.uuid4().hex[:8]}"
    configured = answer(cli(node_cluster, "queue", "configure", queue, "--set", "maxPayloadBytes=16", "--set", "retryLimit=2"))
    assert (configured["options"]["maxPayloadBytes"], configured["options"]["retryLimit"]) == (16, 2)
    over = refusal(cli(node_cluster, "push", queue, "--payload", json.dumps("x" * 32)))
    assert over["results"][0]["error"] == "payload_too_large"
    assert answer(cli(node_cluster, "push", queue, "--payload", "1"))["status"] == "queued"
    bad = refusal(cli(node_cluster, "queue", "configure", queue, "--set", "noSuchOption=1"))
    assert bad["error"] == "bad_request" and "noSuchOption" in bad["message"]


def test_usage_counts_what_was_pushed_and_scheduled(node_cluster):
    queue = f"cli-usage-{uuid.uuid4().hex[:8]}"
    before = answer(cli(node_cluster, "usage", token_text=ADMIN, env_urls=True))
    answer(cli(node_cluster, "push", queue, "--payload", "1"))
    answer(cli(node_cluster, "timer", "schedule", queue, "later", "--delay", "1h", "--payload", "1"))
    after = answer(cli(node_cluster, "usage", token_text=ADMIN))
    assert after["tenant"] == "acme"
    assert after["billedMessages"] - before["billedMessages"] == 2
    assert after["pushedMessages"] - before["pushedMessages"] == 1
    assert after["pendingTimers"] - before["pendingTimers"] == 1
    assert refusal(cli(node_cluster, "usage"))["error"] == "forbidden"  # admin tokens only


def test_a_transaction_file_commits_and_a_refused_one_exits_1_and_changes_nothing(node_cluster, tmp_path):
    queue, ns = f"cli-tx-{uuid.uuid4().hex[:8]}", f"ns-{uuid.uuid4().hex[:8]}"
    hold = tmp_path / "hold.json"
    hold.write_text(json.dumps({
        "operations": [{"type": "push", "queue": queue, "payload": {"held": "b-1"}, "transactionId": "held-b-1"}],
        "kv": [{"op": "put", "ns": ns, "key": "b-1", "value": {"state": "held"}}],
        "timers": [{"op": "schedule", "queue": queue, "timerKey": "b-1", "delayMs": 900_000, "txn": "expire-b-1",
                    "payload": "AA=="}]}))
    committed = answer(cli(node_cluster, "transaction", "--file", str(hold)))
    assert committed["success"] is True and len(committed["results"]) == 3

    refused_body = tmp_path / "refused.json"
    refused_body.write_text(json.dumps({
        "operations": [{"type": "push", "queue": queue, "payload": "never", "transactionId": "never-1"}],
        "kv": [{"op": "put", "ns": ns, "key": "b-1", "value": "overwritten"},
               {"op": "check", "ns": ns, "key": "b-1", "expectedVersion": 7}],
        "timers": [{"op": "cancel", "queue": queue, "timerKey": "b-1"}]}))
    refused = refusal(cli(node_cluster, "transaction", "--file", str(refused_body)))
    assert (refused["success"], refused["reason"], refused["index"]) == (False, "kv_precondition", 2)

    entry = answer(cli(node_cluster, "kv", "get", ns, "b-1"))
    assert (entry["value"], entry["version"]) == ({"state": "held"}, 1)
    assert answer(cli(node_cluster, "timer", "peek", queue, "b-1"))["txn"] == "expire-b-1"  # the cancel rolled back
    records = node_cluster.call(node_cluster.node_ids[1], "POST", "/api/v1/fetch", RW, {
        "entries": [{"queue": queue, "partition": "Default", "offset": 0, "limit": 10}]})[2]["entries"][0]["records"]
    assert [r["transactionId"] for r in records] == ["held-b-1"]  # the refused push is not there

    assert answer(cli(node_cluster, "kv", "delete", ns, "b-1"))["found"] is True
    assert answer(cli(node_cluster, "kv", "get", ns, "b-1"))["found"] is False
