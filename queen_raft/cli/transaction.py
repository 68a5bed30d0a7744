"""The all-or-nothing and settling commands of `queen-raft`: transaction (a JSON body from a file),
ack (one popped message, by its lease and transactionId) and lease extend.

Output and exit codes as in output.py; a refused transaction (`success: false`, rolled back
whole) exits 1 with its body on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from queen_raft.cli.output import UsageError, client_command, duration_argument, wire
from queen_raft.client import OutcomeUnknown, Queen, TransactionRefused
from queen_raft.client.consumer import ACK_STATUSES, Message
from queen_raft.client.timers import mint_txn
from queen_raft.client.transaction import REASONS_AN_APPLIED_TRY_EXPLAINS

STDIN_NAME = "-"


# --- transaction --------------------------------------------------------------------------------

def read_transaction_body(source: str) -> dict:
    """The JSON object of POST /api/v1/transaction, from a file or stdin (`-`)."""
    try:
        text = sys.stdin.read() if source == STDIN_NAME else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{source} is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise UsageError(f"{source}: the transaction is a JSON object ({{\"operations\", \"kv\", \"timers\"}})")
    return body


def with_minted_ids(body: dict) -> dict:
    """The body with a transactionId on every push and a txn on every schedule that lacks one, fixed
    before the first attempt as the SDK's builder does: a retried commit then carries the same ids,
    so a push applied by a lost first try is a `duplicate` (reported as outcome unknown), never a
    second message. Anything malformed is left as it is for the server to refuse."""
    minted = dict(body)
    operations = body.get("operations")
    if isinstance(operations, list):
        minted["operations"] = [_push_with_minted_ids(op) if isinstance(op, dict) and op.get("type") == "push" else op
                                for op in operations]
    timers = body.get("timers")
    if isinstance(timers, list):
        minted["timers"] = [dict(op, txn=mint_txn())
                            if isinstance(op, dict) and op.get("op") == "schedule" and "txn" not in op
                            else op for op in timers]
    return minted


def _push_with_minted_ids(push: dict) -> dict:
    """A one-message push with its transactionId; a push of several `items` (the Queen 2.x shape)
    with one on each item, none on the push itself (the server refuses a field beside `items`)."""
    if "items" not in push:
        return push if "transactionId" in push else dict(push, transactionId=mint_txn())
    items = push["items"]
    if not isinstance(items, list):
        return push
    return dict(push, items=[dict(item, transactionId=mint_txn())
                             if isinstance(item, dict) and "transactionId" not in item else item for item in items])


def is_idempotent(body: dict) -> bool:
    """An `incr` is not: a retry after a lost answer would add twice (the SDK's Transaction rule)."""
    kv_ops = body.get("kv")
    return not (isinstance(kv_ops, list) and any(isinstance(op, dict) and op.get("op") == "incr" for op in kv_ops))


async def transaction(q: Queen, args: argparse.Namespace) -> Any:
    """The SDK's Transaction builds its body op by op; this sends a finished body through the SDK's
    transport and reads the answer as Transaction.commit does."""
    body = with_minted_ids(read_transaction_body(args.file))
    answer = await q.transport.request("POST", "/api/v1/transaction", json_body=body, idempotent=is_idempotent(body))
    if answer.body.get("success"):
        return answer.body
    reason = answer.body.get("reason") or "refused"
    message = str(answer.body.get("error") or reason)
    if answer.maybe_applied_before and reason in REASONS_AN_APPLIED_TRY_EXPLAINS:
        raise OutcomeUnknown(answer.status, reason, f"the commit was retried and then refused ({message}): "
                             "its first try may have been applied", body=answer.body)
    raise TransactionRefused(answer.status, reason, message, index=answer.body.get("index"), body=answer.body)


# --- ack and lease ------------------------------------------------------------------------------

async def ack(q: Queen, args: argparse.Namespace) -> Any:
    """One acknowledgment under a lease; the verdict `{index, success, dlq}`, or exit 1 (invalid_lease)."""
    message = Message.from_wire({"transactionId": args.txn, "leaseId": args.lease, "partition": args.partition},
                                args.queue, args.group, q.transport)
    return wire(await message.settle(args.status, args.error))


async def lease_extend(q: Queen, args: argparse.Namespace) -> Any:
    return wire(await q.extend_lease(args.lease_id, args.duration))


# --- registration ------------------------------------------------------------------------------

def add_transaction_commands(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    tx = client_command(sub, "transaction", transaction, common, "commit a transaction from a JSON file, all or nothing",
                        description="Sends the body of POST /api/v1/transaction ({operations: [push|ack], kv: "
                        "[...], timers: [...]}, see docs/api.md) and prints {success: true, results}. A refused "
                        "transaction changed nothing: exit 1, its {success: false, reason, error, index?} on "
                        "stderr. Pushes without a transactionId and schedules without a txn get one minted "
                        "before the first try, so a retry cannot apply them twice.")
    tx.add_argument("--file", required=True, metavar="FILE", help="the JSON body; '-' reads stdin")

    ack_parser = client_command(sub, "ack", ack, common, "settle one popped message under its lease",
                                description="completed advances the cursor; failed spends one of the queue's "
                                "retries (past retryLimit: the DLQ); retry releases it without spending one; "
                                "dlq files it at once. A wrong or expired lease exits 1 (invalid_lease).")
    ack_parser.add_argument("queue")
    ack_parser.add_argument("txn", metavar="TRANSACTION_ID", help="the message's transactionId, from `pop`")
    ack_parser.add_argument("--lease", required=True, help="the leaseId `pop` printed")
    ack_parser.add_argument("--partition", default="Default")
    ack_parser.add_argument("--group", help="the consumer group it was popped for (default: queue mode)")
    ack_parser.add_argument("--status", choices=ACK_STATUSES, default="completed")
    ack_parser.add_argument("--error", help="why (kept on a DLQ row)")

    lease = sub.add_parser("lease", help="extend a pop's lease")
    lease_sub = lease.add_subparsers(dest="lease_command", required=True)
    extend = client_command(lease_sub, "extend", lease_extend, common, "the lease now ends DURATION after the group's now")
    extend.add_argument("lease_id", metavar="LEASE_ID")
    extend.add_argument("duration", type=duration_argument, help="'90s', '5m' (whole seconds, 1s..1h)")
