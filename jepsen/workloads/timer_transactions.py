"""The timers workload's operations through `POST /api/v1/transaction` (docs/api.md, Transactions).

Two shapes, both one entry, all or nothing:

- a planned schedule or cancel sent as a transaction holding that one timer op (`via: "txn"`);
- a consumer's ack sent as a transaction that also cancels a timer (`via: "txn-ack"`), the
  pattern of a handler that settles a message and cancels a follow-up timer in one step. The
  cancelled key is, in turn, the one whose fire the consumer holds (its txn is `<key>-<version>`:
  the cancel races that key's next schedule, and mostly answers `absent`, or `fired` on a queue
  with a dedup window) and the next key (`t<k+1>`, mostly pending: `cancelled`).

Each is recorded as an ordinary `schedule` or `cancel` of its key, answered in the same shape as
the timer routes' answers, so the timer checkers judge it as they judge the others: the timer
result is the transaction's result at the timer op's index (after the acks). A transaction refused
with `success: false` changed nothing (the entry committed and rolled back): `fail`, and its acks
did not apply either. An `info` transaction may or may not have applied, timer op and acks alike.
The `txn-ack` cancel's value carries the ack's `queue`, `group`, `leaseId` and `items`, so the
consumer checkers count it as an ack (queue_checkers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jepsen.client import HistoryClient, Outcome
from jepsen.history import FAIL, INFO, OK
from jepsen.workloads.messages import PARTITION, Consumer

TRANSACTION_PATH = "/api/v1/transaction"
# A consumer acks every this-many-th non-empty batch through a transaction that cancels a timer;
# the others through /api/v1/ack/batch.
ACK_CANCEL_EVERY = 3


def timer_result_at(outcome: Outcome, index: int) -> Outcome:
    """The transaction's answer reduced to its timer op's result, as the timer routes answer it
    (`{"results": [result]}`): what normalize_schedule and normalize_cancel read. A refusal
    (`success: false`) is a `fail` that keeps its reason; a 2xx body without the result is `info`."""
    if outcome.type != OK:
        return outcome
    body = outcome.body if isinstance(outcome.body, dict) else {}
    if body.get("success") is False:
        return Outcome(FAIL, outcome.status, {"transaction": "refused", "reason": body.get("reason"),
                                              "index": body.get("index"), "error": str(body.get("error"))[:200]})
    results = body.get("results")
    if body.get("success") is not True or not isinstance(results, list) or len(results) <= index \
            or not isinstance(results[index], dict):
        return Outcome(INFO, outcome.status, {"unexpected_body": str(body)[:300]})
    return Outcome(OK, outcome.status, {"results": [results[index]]})


Normalize = Callable[[Outcome], tuple[str, dict]]


def normalized_at(normalize: Normalize, index: int) -> Normalize:
    """`normalize` applied to the timer op's result inside a transaction answer."""
    def apply(outcome: Outcome) -> tuple[str, dict]:
        reduced = timer_result_at(outcome, index)
        return normalize(reduced) if reduced.type == OK else (reduced.type, reduced.answer)
    return apply


def key_of(txn: str) -> str:
    """The timer key a timers-workload txn was minted for (`t<k>-<version>` -> `t<k>`)."""
    return txn.rsplit("-", 1)[0]


def next_key(key: str, key_count: int) -> str:
    """The timers workload's key after `key` (`t<k>` -> `t<k+1>`, wrapping at key_count)."""
    return f"t{(int(key[1:]) + 1) % key_count}"


class AckCancelConsumer(Consumer):
    """A consumer of the timers workload's destination queue: like Consumer, but every
    ACK_CANCEL_EVERY-th batch is acked in a transaction that also cancels a timer on `timer_queue`."""

    def __init__(self, *args: Any, timer_queue: str, normalize_cancel: Callable, key_count: int,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timer_queue = timer_queue
        self.normalize_cancel = normalize_cancel
        self.key_count = key_count
        self.batches = 0

    async def ack(self, lease_id: str | None, messages: list[dict]) -> str:
        self.batches += 1
        if self.batches % ACK_CANCEL_EVERY:
            return await super().ack(lease_id, messages)
        key = key_of(str(messages[0]["txn"]))
        if (self.batches // ACK_CANCEL_EVERY) % 2:
            key = next_key(key, self.key_count)
        items = [{"txn": m["txn"], "offset": m["offset"]} for m in messages]
        body = {
            "operations": [{"type": "ack", "consumerGroup": self.group, "leaseId": lease_id, "partition": PARTITION,
                            "offset": m["offset"], "status": "completed"} for m in messages],
            "timers": [{"op": "cancel", "queue": self.timer_queue, "timerKey": key}],
        }
        value = {"key": key, "via": "txn-ack", "queue": self.queue, "group": self.group, "leaseId": lease_id,
                 "items": items}
        client: HistoryClient = self.client
        type_, _ = await client.call(self.process, self.node, "cancel", value, "POST", TRANSACTION_PATH, body,
                                     normalized_at(self.normalize_cancel, len(messages)))
        return type_
