"""The operator and transaction commands (dlq, admin, usage, queue configure, kv delete, transaction,
ack, lease extend) through `main()`, against the real app over the real state machine on a real
port (FakeGroups: only Raft is left out), served from a thread of its own."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shlex
import threading
from pathlib import Path

import pytest
from aiohttp import web

from queen_raft.api.app import create_app
from queen_raft.cli import build_parser, main
from queen_raft.cli import operator as cli_operator
from queen_raft.cli.output import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from queen_raft.cli.transaction import is_idempotent, with_minted_ids
from test_api_fake_group import make_serving

# Every call of the test thread into the server's loop answers in milliseconds; this is a hang.
LOOP_CALL_TIMEOUT_S = 10.0
GARBAGE_ZSTD = base64.b64encode(b"not zstd at all").decode()


class InProcessNode:
    """The API on 127.0.0.1:<free port>, its event loop in a daemon thread, so the CLI's own
    asyncio.run in the test thread talks to it over HTTP as it would to a node."""

    def __init__(self, env: dict[str, str] | None = None):
        self.serving, self.groups = make_serving(env)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cli-test-node", daemon=True)
        self.runner = web.AppRunner(create_app(self.serving))
        self.url = ""

    def on_loop(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(LOOP_CALL_TIMEOUT_S)

    def start(self) -> "InProcessNode":
        self.thread.start()
        self.on_loop(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.on_loop(site.start())
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def tick(self, tenant: str) -> dict:
        """A leader tick of the tenant's group (1 ms later), on the server's loop like every apply."""
        async def advance() -> dict:
            return self.groups[tenant].advance(1)
        return self.on_loop(advance())

    def stop(self) -> None:
        self.on_loop(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(LOOP_CALL_TIMEOUT_S)
        self.loop.close()


@pytest.fixture
def node():
    started = InProcessNode().start()
    yield started
    started.stop()


@pytest.fixture
def one_try_node():
    """A timer whose fire fails permanently is filed in the DLQ at its first failure."""
    started = InProcessNode(env={"QUEEN_RAFT_TIMER_FIRE_MAX_ATTEMPTS": "1"}).start()
    yield started
    started.stop()


def cli(node: InProcessNode, capsys, *argv: str, token: str = "acme-rw") -> tuple[int, object, object]:
    """(exit code, stdout JSON or None, last stderr line as JSON, or its text when not JSON)."""
    capsys.readouterr()
    code = main([*argv, "--url", node.url, "--token", token, "--retry-budget", "1"])
    out = capsys.readouterr()
    last_err = out.err.strip().splitlines()[-1] if out.err.strip() else ""
    try:
        err = json.loads(last_err) if last_err else None
    except ValueError:
        err = last_err
    return code, json.loads(out.out) if out.out.strip() else None, err


def dead_letters(node, capsys, count: int) -> list[dict]:
    """Pushes `count` messages to queue q, pops them under one lease and files each in the DLQ by ack."""
    for i in range(count):
        assert cli(node, capsys, "push", "q", "--payload", str(i), "--txn", f"m{i}")[0] == EXIT_OK
    code, popped, _ = cli(node, capsys, "pop", "q", "--batch", str(count))
    assert code == EXIT_OK and len(popped["messages"]) == count
    verdicts = [cli(node, capsys, "ack", "q", f"m{i}", "--lease", popped["leaseId"], "--status", "dlq",
                    "--error", f"poison-{i}") for i in range(count)]
    assert [(code, v["success"], v["dlq"]) for code, v, _ in verdicts] == [(EXIT_OK, True, True)] * count
    code, listed, _ = cli(node, capsys, "dlq", "list", "q")
    assert code == EXIT_OK
    return listed["rows"]


# --- argument parsing ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["dlq", "list", "q", "--limit", "0"],
    ["dlq", "replay"],
    ["ack", "q", "txn-1"],  # --lease is required
    ["ack", "q", "txn-1", "--lease", "L", "--status", "done"],
    ["transaction"],  # --file is required
    ["lease", "extend", "L", "soon"],
    ["admin", "stop"],
    ["kv", "delete", "ns"],
])
def test_bad_operator_command_lines_exit_2(argv):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == EXIT_USAGE


def test_operator_arguments_parse():
    parser = build_parser()
    args = parser.parse_args(["queue", "configure", "orders", "--set", "retryLimit=5", "--set", "deadLetterQueue=true",
                              "--replace"])
    assert (args.queue, args.set, args.replace) == ("orders", ["retryLimit=5", "deadLetterQueue=true"], True)
    args = parser.parse_args(["dlq", "list", "--group", "__timer__"])
    assert (args.queue, args.group, args.limit) == (None, "__timer__", None)
    args = parser.parse_args(["ack", "q", "t-1", "--lease", "L", "--partition", "p", "--status", "failed"])
    assert (args.txn, args.lease, args.partition, args.status, args.group) == ("t-1", "L", "p", "failed", None)


def test_minted_ids_fill_only_what_is_missing_and_incr_is_not_idempotent():
    body = {"operations": [{"type": "push", "queue": "a", "payload": 1}, {"type": "push", "queue": "a", "transactionId": "keep"},
                           {"type": "ack", "leaseId": "L", "transactionId": "x"}],
            "timers": [{"op": "schedule", "queue": "t", "timerKey": "k", "delayMs": 1, "payload": "AA=="},
                       {"op": "cancel", "queue": "t", "timerKey": "k2"}],
            "kv": [{"op": "put", "ns": "n", "key": "k", "value": 1}]}
    minted = with_minted_ids(body)
    first_push, kept_push, ack_op = minted["operations"]
    assert len(first_push["transactionId"]) == 32 and kept_push["transactionId"] == "keep"
    assert ack_op == body["operations"][2] and "transactionId" not in body["operations"][0]  # the input is not changed
    assert len(minted["timers"][0]["txn"]) == 32 and "txn" not in minted["timers"][1]
    assert with_minted_ids(body)["operations"][0]["transactionId"] != first_push["transactionId"]
    assert with_minted_ids({"operations": "nonsense"}) == {"operations": "nonsense"}  # the server refuses it
    assert is_idempotent(body)


def test_minted_ids_go_on_each_item_of_a_push_of_several_items():
    body = {"operations": [{"type": "push", "items": [{"queue": "a", "payload": 1},
                                                      {"queue": "a", "payload": 2, "transactionId": "keep"}, "bad"]}]}
    [push] = with_minted_ids(body)["operations"]
    assert set(push) == {"type", "items"}  # a push of items takes no transactionId of its own
    first, kept, bad = push["items"]
    assert len(first["transactionId"]) == 32 and kept["transactionId"] == "keep" and bad == "bad"
    assert "transactionId" not in body["operations"][0]["items"][0]  # the input is not changed
    assert not is_idempotent({"kv": [{"op": "incr", "ns": "n", "key": "c", "by": 1}]})


# --- dlq and ack ------------------------------------------------------------------------------

def test_dlq_list_filters_limits_and_replays_once(node, capsys):
    rows = dead_letters(node, capsys, 3)
    assert [(r["transactionId"], r["error"]) for r in rows] == [("m0", "poison-0"), ("m1", "poison-1"), ("m2", "poison-2")]
    code, page, _ = cli(node, capsys, "dlq", "list", "q", "--limit", "2")
    assert [r["transactionId"] for r in page["rows"]] == ["m0", "m1"]
    assert (page["truncated"], page["nextAfter"]) == (True, rows[1]["dlqId"])
    _, rest, _ = cli(node, capsys, "dlq", "list", "q", "--limit", "2", "--after", page["nextAfter"])
    assert [r["transactionId"] for r in rest["rows"]] == ["m2"] and (rest["truncated"], rest["nextAfter"]) == (False, None)
    _, whole, _ = cli(node, capsys, "dlq", "list", "q", "--limit", "3", token="acme-ro")
    assert len(whole["rows"]) == 3 and whole["truncated"] is False  # exact: no row follows
    _, every_queue, _ = cli(node, capsys, "dlq", "list", "--group", "__QUEUE_MODE__", "--partition", "Default")
    assert len(every_queue["rows"]) == 3 and every_queue["truncated"] is False
    _, limited, _ = cli(node, capsys, "dlq", "list", "--group", "__QUEUE_MODE__", "--limit", "1")
    assert [r["transactionId"] for r in limited["rows"]] == ["m0"] and limited["truncated"] is True
    _, other, _ = cli(node, capsys, "dlq", "list", "q", "--group", "billing")
    assert other == {"rows": [], "truncated": False, "nextAfter": None}

    code, replayed, _ = cli(node, capsys, "dlq", "replay", rows[1]["dlqId"])
    assert code == EXIT_OK and replayed["status"] == "queued" and replayed["transactionId"] == replayed["messageId"]
    code, out, err = cli(node, capsys, "dlq", "replay", rows[1]["dlqId"])
    assert (code, out, err["error"]) == (EXIT_REFUSED, None, "not_found")
    _, after, _ = cli(node, capsys, "dlq", "list", "q")
    assert [r["transactionId"] for r in after["rows"]] == ["m0", "m2"]
    code, popped, _ = cli(node, capsys, "pop", "q", "--auto-ack")
    assert [m["payload"] for m in popped["messages"]] == [1]  # m1's payload, pushed again


def dead_letters_in_partitions(node, capsys, partitions: list[str]) -> list[str]:
    """Files one dead letter per entry of `partitions` (in that order), each pushed to queue q in
    that partition; their transactionIds in filing order."""
    txns = []
    for i, partition in enumerate(partitions):
        txn = f"p{i}"
        assert cli(node, capsys, "push", "q", "--payload", str(i), "--txn", txn, "--partition", partition)[0] == EXIT_OK
        code, popped, _ = cli(node, capsys, "pop", "q", "--partition", partition)
        assert code == EXIT_OK and [m["transactionId"] for m in popped["messages"]] == [txn]
        code, verdict, _ = cli(node, capsys, "ack", "q", txn, "--lease", popped["leaseId"], "--partition", partition,
                               "--status", "dlq")
        assert code == EXIT_OK and verdict["dlq"] is True
        txns.append(txn)
    return txns


def test_a_filtered_dlq_list_reads_past_the_first_server_page(node, capsys, monkeypatch):
    """The filter reads on past the server's first page (the page is made tiny here so that 7 rows
    span 4 pages)."""
    monkeypatch.setattr(cli_operator, "DLQ_SERVER_MAX_ROWS", 2)
    txns = dead_letters_in_partitions(node, capsys, ["a", "a", "a", "a", "a", "b", "b"])
    code, listed, _ = cli(node, capsys, "dlq", "list", "q", "--partition", "b")
    assert code == EXIT_OK and [r["transactionId"] for r in listed["rows"]] == txns[5:]
    assert (listed["truncated"], listed["nextAfter"]) == (False, None)
    _, first, _ = cli(node, capsys, "dlq", "list", "q", "--partition", "b", "--limit", "1")
    assert [r["transactionId"] for r in first["rows"]] == [txns[5]] and first["truncated"] is True
    _, second, _ = cli(node, capsys, "dlq", "list", "q", "--partition", "b", "--limit", "1", "--after", first["nextAfter"])
    assert [r["transactionId"] for r in second["rows"]] == [txns[6]] and second["truncated"] is False


def test_dlq_list_all_pages_through_every_row(node, capsys, monkeypatch):
    monkeypatch.setattr(cli_operator, "DLQ_SERVER_MAX_ROWS", 2)
    txns = dead_letters_in_partitions(node, capsys, ["a", "b", "a", "b", "a"])
    code, listed, _ = cli(node, capsys, "dlq", "list", "--all")
    assert code == EXIT_OK and [r["transactionId"] for r in listed["rows"]] == txns
    assert (listed["truncated"], listed["nextAfter"]) == (False, None)
    _, from_cursor, _ = cli(node, capsys, "dlq", "list", "--all", "--partition", "a", "--after", listed["rows"][1]["dlqId"])
    assert [r["transactionId"] for r in from_cursor["rows"]] == [txns[2], txns[4]]
    code, _, err = cli(node, capsys, "dlq", "list", "--all", "--limit", "5")
    assert code == EXIT_USAGE and "--all" in err
    code, _, err = cli(node, capsys, "dlq", "list", "--after", "17")
    assert (code, err["error"]) == (EXIT_REFUSED, "bad_request")


def test_ack_settles_by_lease_and_a_wrong_lease_exits_1(node, capsys):
    cli(node, capsys, "push", "q", "--payload", '{"n": 1}', "--txn", "a-1")
    _, popped, _ = cli(node, capsys, "pop", "q", "--group", "g")
    lease = popped["leaseId"]
    code, out, err = cli(node, capsys, "ack", "q", "a-1", "--lease", "not-the-lease", "--group", "g")
    assert (code, out) == (EXIT_REFUSED, None) and err["results"][0]["error"] == "invalid_lease"
    code, extended, _ = cli(node, capsys, "lease", "extend", lease, "90s")
    assert code == EXIT_OK and extended["leaseId"] == lease and extended["expiresAt"] > 0
    code, verdict, _ = cli(node, capsys, "ack", "q", "a-1", "--lease", lease, "--group", "g")
    assert (code, verdict["success"], verdict["dlq"]) == (EXIT_OK, True, False)
    assert cli(node, capsys, "pop", "q", "--group", "g")[1]["messages"] == []  # settled
    code, _, err = cli(node, capsys, "lease", "extend", lease, "60s")  # every message settled: the lease is gone
    assert (code, err["error"]) == (EXIT_REFUSED, "invalid_lease")


def test_a_timers_dead_letter_is_listed_and_its_replay_exits_1(one_try_node, capsys, tmp_path):
    body = tmp_path / "bad-timer.json"
    body.write_text(json.dumps({"timers": [{"op": "schedule", "queue": "q", "timerKey": "bad", "delayMs": 0, "txn": "t-bad",
                                            "payload": GARBAGE_ZSTD, "payloadZstd": True}]}))
    assert cli(one_try_node, capsys, "transaction", "--file", str(body))[0] == EXIT_OK
    one_try_node.tick("acme")  # the fire fails and, at its only attempt, files the row
    code, listed, _ = cli(one_try_node, capsys, "dlq", "list", "q", "--group", "__timer__")
    (row,) = listed["rows"]
    assert (row["timerKey"], row["offset"], row["transactionId"]) == ("bad", -1, "t-bad")
    code, out, err = cli(one_try_node, capsys, "dlq", "replay", row["dlqId"])
    assert (code, out, err["error"]) == (EXIT_REFUSED, None, "dlq_replay_refused")
    assert len(cli(one_try_node, capsys, "dlq", "list", "q")[1]["rows"]) == 1  # the row stays


# --- admin, usage, configure, kv delete ---------------------------------------------------------

def test_pause_refuses_schedules_not_cancels_and_resume_lifts_it(node, capsys):
    schedule = ("timer", "schedule", "r", "k1", "--delay", "1h", "--payload", "1")
    assert cli(node, capsys, *schedule)[0] == EXIT_OK
    code, _, err = cli(node, capsys, "admin", "pause")
    assert (code, err["error"]) == (EXIT_REFUSED, "forbidden")  # admin tokens only
    assert cli(node, capsys, "admin", "pause", token="acme-admin")[:2] == (EXIT_OK, {"tenant": "acme", "paused": True})

    code, out, err = cli(node, capsys, "timer", "schedule", "r", "k2", "--delay", "1h", "--payload", "1")
    assert (code, out, err["error"]) == (EXIT_REFUSED, None, "timers_disabled")
    code, cancelled, _ = cli(node, capsys, "timer", "cancel", "r", "k1")
    assert (code, cancelled["status"]) == (EXIT_OK, "cancelled")
    assert cli(node, capsys, "usage", token="acme-admin")[1]["schedulingPaused"] is True
    assert cli(node, capsys, "usage", token="globex-admin")[1]["schedulingPaused"] is False  # the token's tenant only

    assert cli(node, capsys, "admin", "resume", token="acme-admin")[:2] == (EXIT_OK, {"tenant": "acme", "paused": False})
    code, scheduled, _ = cli(node, capsys, "timer", "schedule", "r", "k2", "--delay", "1h", "--payload", "1")
    assert (code, scheduled["status"]) == (EXIT_OK, "scheduled")


def test_usage_counts_billed_pushed_and_pending(node, capsys):
    cli(node, capsys, "push", "q", "--payload", "1")
    cli(node, capsys, "timer", "schedule", "r", "k", "--delay", "1h", "--payload", "1")
    code, usage, _ = cli(node, capsys, "usage", token="acme-admin")
    assert code == EXIT_OK
    assert (usage["tenant"], usage["billedMessages"], usage["pushedMessages"], usage["pendingTimers"]) == ("acme", 2, 1, 1)
    assert usage["fired"] == {"appended": 0, "duplicate": 0, "failed": 0, "dlq": 0}


def test_configure_merges_replaces_and_a_bad_option_gets_the_servers_400(node, capsys):
    code, configured, _ = cli(node, capsys, "queue", "configure", "small", "--set", "maxPayloadBytes=8", "--set", "retryLimit=2")
    assert code == EXIT_OK and configured["queue"] == "small"
    assert (configured["options"]["maxPayloadBytes"], configured["options"]["retryLimit"]) == (8, 2)
    code, out, err = cli(node, capsys, "push", "small", "--payload", '"far more than eight bytes"')
    assert (code, out) == (EXIT_REFUSED, None) and err["results"][0]["error"] == "payload_too_large"
    assert cli(node, capsys, "push", "small", "--payload", "1")[0] == EXIT_OK

    merged = cli(node, capsys, "queue", "configure", "small", "--set", "deadLetterQueue=false")[1]["options"]
    assert (merged["maxPayloadBytes"], merged["retryLimit"], merged["deadLetterQueue"]) == (8, 2, False)
    replaced = cli(node, capsys, "queue", "configure", "small", "--set", "retryLimit=1", "--replace")[1]["options"]
    assert replaced["retryLimit"] == 1 and replaced["maxPayloadBytes"] != 8 and replaced["deadLetterQueue"] is True

    for bad in ("bogusOption=1", "retryLimit=lots", "leaseTime=true"):
        code, out, err = cli(node, capsys, "queue", "configure", "small", "--set", bad)
        assert (code, out, err["error"]) == (EXIT_REFUSED, None, "bad_request"), bad
    assert cli(node, capsys, "queue", "configure", "small")[0] == EXIT_USAGE  # nothing to set
    assert cli(node, capsys, "queue", "configure", "small", "--set", "retryLimit")[0] == EXIT_USAGE
    assert cli(node, capsys, "queue", "configure", "small", "--set", "retryLimit=1", "--set", "retryLimit=2")[0] == EXIT_USAGE
    assert cli(node, capsys, "queue", "configure", "small", "--set", "retryLimit=0")[1]["options"]["retryLimit"] == 0


def test_kv_delete_says_whether_a_live_key_was_deleted(node, capsys):
    cli(node, capsys, "kv", "put", "carts", "user/7", '{"items": [1]}')
    code, deleted, _ = cli(node, capsys, "kv", "delete", "carts", "user/7")
    assert (code, deleted["found"]) == (EXIT_OK, True)
    assert cli(node, capsys, "kv", "get", "carts", "user/7")[1]["found"] is False
    assert cli(node, capsys, "kv", "delete", "carts", "user/7")[1]["found"] is False
    code, _, err = cli(node, capsys, "kv", "delete", "carts", "user/7", token="acme-ro")
    assert (code, err["error"]) == (EXIT_REFUSED, "forbidden")


# --- transaction --------------------------------------------------------------------------------

def test_transaction_file_commits_and_a_refused_one_changes_nothing(node, capsys, tmp_path):
    committed = tmp_path / "hold.json"
    committed.write_text(json.dumps({
        "operations": [{"type": "push", "queue": "audit", "payload": {"held": "b-1"}}],
        "kv": [{"op": "put", "ns": "bookings", "key": "b-1", "value": {"state": "held"}}],
        "timers": [{"op": "schedule", "queue": "bookings", "timerKey": "b-1", "delayMs": 900_000, "payload": "AA=="}]}))
    code, answer, _ = cli(node, capsys, "transaction", "--file", str(committed))
    assert code == EXIT_OK and answer["success"] is True and len(answer["results"]) == 3
    assert len(answer["results"][0]["transactionId"]) == 32  # minted by the CLI, before the first try

    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps({
        "operations": [{"type": "push", "queue": "audit", "payload": "never", "transactionId": "never-1"}],
        "kv": [{"op": "check", "ns": "bookings", "key": "b-1", "expectedVersion": 7},
               {"op": "put", "ns": "bookings", "key": "b-1", "value": "overwritten"}]}))
    code, out, err = cli(node, capsys, "transaction", "--file", str(refused))
    assert (code, out) == (EXIT_REFUSED, None)
    assert (err["success"], err["reason"], err["index"]) == (False, "kv_precondition", 1)
    assert cli(node, capsys, "kv", "get", "bookings", "b-1")[1]["value"] == {"state": "held"}
    popped = cli(node, capsys, "pop", "audit", "--batch", "10", "--auto-ack")[1]["messages"]
    assert [m["payload"] for m in popped] == [{"held": "b-1"}]  # the refused push is not there

    code, _, err = cli(node, capsys, "transaction", "--file", str(tmp_path / "missing.json"))
    assert code == EXIT_USAGE and "cannot read" in err
    (tmp_path / "array.json").write_text("[]")
    assert cli(node, capsys, "transaction", "--file", str(tmp_path / "array.json"))[0] == EXIT_USAGE
    (tmp_path / "broken.json").write_text("{")
    assert cli(node, capsys, "transaction", "--file", str(tmp_path / "broken.json"))[0] == EXIT_USAGE
    (tmp_path / "empty.json").write_text("{}")
    code, _, err = cli(node, capsys, "transaction", "--file", str(tmp_path / "empty.json"))
    assert code == EXIT_REFUSED and err["reason"] == "bad_request"  # the server's 400


def test_transaction_reads_stdin(node, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"kv": [{"op": "put", "ns": "n", "key": "k", "value": 1}]})))
    code, answer, _ = cli(node, capsys, "transaction", "--file", "-")
    assert code == EXIT_OK and answer["results"][0]["version"] == 1


# --- the documentation ----------------------------------------------------------------------------

DOCUMENTED_IN = ("docs/sdk.md", "README.md")
CLI_PREFIXES = ("queen-raft ", ".venv/bin/queen-raft ")


def documented_command_lines() -> list[tuple[str, str]]:
    repo = Path(__file__).resolve().parents[2]
    lines = []
    for name in DOCUMENTED_IN:
        for line in (repo / name).read_text().splitlines():
            if line.startswith(CLI_PREFIXES):
                lines.append((name, line))
    return lines


def test_the_docs_show_a_cli_line_for_every_client_command():
    shown = {" ".join(shlex.split(line, comments=True)[1:3]) for _, line in documented_command_lines()}
    for command in ("dlq list", "dlq replay", "admin pause", "admin resume", "queue configure", "kv delete",
                    "ack reminders", "lease extend", "timer schedule", "timer cancel", "push orders"):
        assert command in shown, command
    assert any(line.split()[1:2] == ["usage"] for _, line in documented_command_lines())
    assert any(line.split()[1:2] == ["transaction"] for _, line in documented_command_lines())


@pytest.mark.parametrize("where,line", documented_command_lines())
def test_every_documented_cli_line_parses(where, line):
    argv = shlex.split(line, comments=True)[1:]
    if argv == ["--version"]:  # prints and exits 0 while parsing
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        assert exited.value.code == 0
        return
    assert build_parser().parse_args(argv).command == argv[0]  # a line that does not parse exits 2 here
