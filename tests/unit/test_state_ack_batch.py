"""An ack command applied in one pass (queen_raft/state/ack_batch.py): items named by transactionId
are found through an index of the lease built once per command, with the answers and the state the
scan of the lease per item gives, repeated transactionIds included (a dedup window of 0)."""

from __future__ import annotations

import msgpack

from queen_raft.state import TenantState
from queen_raft.state.ack_batch import answer_retry
from queen_raft.state.partition import Partition

T0 = 1_700_000_000_000


def shipped(command: dict) -> dict:
    return msgpack.unpackb(msgpack.packb(command, use_bin_type=True), raw=False)


def leased_state(txns: list[str], window_s: int = 3600) -> TenantState:
    state = TenantState()
    state.apply(shipped({"op": "configure", "now": T0, "queue": "q", "options": {"dedupWindowSeconds": window_s}}))
    state.apply(shipped({"op": "push", "now": T0, "producerSub": "s", "rows": [
        ["q", "Default", b"x", txn, f"m{i}", None, False] for i, txn in enumerate(txns)]}))
    popped = state.apply(shipped({"op": "pop", "now": T0, "queue": "q", "partition": None, "consumerGroup": None,
                                  "batch": len(txns), "leaseId": "L", "autoAck": False}))
    assert len(popped["messages"]) == len(txns)
    return state


def scanned_ack(state: TenantState, items: list[dict], now: int) -> list[dict]:
    """The ack as the broker applied it before the index: resolve_ack scanning the lease per item."""
    broker, results = state.broker, []
    for index, item in enumerate(items):
        resolved = broker.resolve_ack("__QUEUE_MODE__", "L", item, now)
        if resolved is None:
            results.append(answer_retry(broker, "__QUEUE_MODE__", "L", item, index, now))
            continue
        filed = broker.settle(*resolved, item["status"], item.get("error"), now)
        results.append({"index": index, "success": True, "dlq": filed})
    return results


def test_acks_by_transaction_id_answer_and_settle_as_the_scan_of_the_lease_did():
    txns = ["a", "b", "a", "c", "b", "a"]  # one window of 0 lets a lease hold a txn twice
    items = [{"partition": "Default", "transactionId": t, "status": s} for t, s in
             [("a", "completed"), ("a", "retry"), ("b", "failed"), ("a", "completed"), ("a", "completed"),
              ("zz", "completed"), ("c", "dlq"), ("b", "completed"), ("b", "completed")]]
    indexed, scanned = leased_state(txns, window_s=0), leased_state(txns, window_s=0)
    answer = indexed.apply(shipped({"op": "ack", "now": T0 + 1, "consumerGroup": None, "leaseId": "L",
                                    "acknowledgments": items}))
    assert answer["results"] == scanned_ack(scanned, items, T0 + 1)
    assert [r["success"] for r in answer["results"]] == [True] * 5 + [False, True, True, False]
    assert indexed.broker.to_wire() == scanned.broker.to_wire()


def test_an_ack_of_a_whole_batch_reads_each_message_of_the_lease_once(monkeypatch):
    txns = [f"t{i}" for i in range(100)]
    state = leased_state(txns)
    reads = []
    real = Partition.message
    monkeypatch.setattr(Partition, "message", lambda self, offset: reads.append(offset) or real(self, offset))
    answer = state.apply(shipped({"op": "ack", "now": T0 + 1, "consumerGroup": None, "leaseId": "L",
                                  "acknowledgments": [{"partition": "Default", "transactionId": t, "status": "completed"}
                                                      for t in reversed(txns)]}))
    assert all(r["success"] for r in answer["results"]) and "L" not in state.broker.leases
    assert len(reads) <= len(txns) + 1  # the scan per item read 5,050 here
