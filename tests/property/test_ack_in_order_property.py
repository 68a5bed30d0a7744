"""An ack command settles, answers and releases exactly as the item-by-item path does
(`Broker.resolve_ack` then `Broker.settle` per item, queen_raft/state/ack_batch.py): two replicas
holding the same lease, one fed the ack command, the other each item through the reference path,
give the same answers and the same snapshot. The items are mostly the usual run (`completed`, by
transactionId, in delivery order), which the command settles in one pass, cut anywhere by an item of
another kind: another status, an offset, another partition or queue, a transactionId out of order
or unknown, an item repeated after the lease was released by its acks. A replica that leaves the
answers out reaches the same snapshot.
"""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypothesis_depth import PROPERTY_TIMEOUT_S, SEQUENCE_SETTINGS
from queen_raft.state import TenantState
from queen_raft.state.ack_batch import answer_retry

pytestmark = pytest.mark.timeout(PROPERTY_TIMEOUT_S)

T0 = 1_700_000_000_000
GROUP = "__QUEUE_MODE__"
STATUSES = ["completed", "failed", "retry", "dlq"]


def shipped(value):
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


def leased_state(txns: list[str], window_s: int) -> TenantState:
    state = TenantState()
    state.apply(shipped({"op": "configure", "now": T0, "queue": "q",
                         "options": {"dedupWindowSeconds": window_s, "retryLimit": 1}}))
    state.apply(shipped({"op": "push", "now": T0, "producerSub": "s", "rows": [
        ["q", "Default", b"x", txn, f"m{i}", None, False] for i, txn in enumerate(txns)]}))
    popped = state.apply(shipped({"op": "pop", "now": T0, "queue": "q", "partition": None, "consumerGroup": None,
                                  "batch": len(txns), "leaseId": "L", "autoAck": False}))
    assert len(popped["messages"]) == len(txns)
    return state


def reference_ack(state: TenantState, items: list[dict], now: int) -> list[dict]:
    broker, results = state.broker, []
    for index, item in enumerate(items):
        resolved = broker.resolve_ack(GROUP, "L", item, now)
        if resolved is None:
            results.append(answer_retry(broker, GROUP, "L", item, index, now))
            continue
        filed = broker.settle(*resolved, item["status"], item.get("error"), now)
        results.append({"index": index, "success": True, "dlq": filed})
    return results


@st.composite
def ack_case(draw):
    window_s = draw(st.sampled_from([0, 3600]))  # 0 lets a lease hold one transactionId twice
    count = draw(st.integers(1, 8))
    txns = [draw(st.sampled_from(["a", "b", "c"])) if window_s == 0 else f"t{i}" for i in range(count)]
    items = []
    in_order = 0
    for _ in range(draw(st.integers(1, count + 4))):
        kind = draw(st.integers(0, 9))
        if kind <= 4:  # the usual item: the next message in delivery order, completed
            txn = txns[in_order % count]
            in_order += 1
            items.append({"partition": "Default", "transactionId": txn, "status": "completed"})
        elif kind == 5:  # the next message or any other, with any status
            txn = draw(st.sampled_from([txns[in_order % count], *txns, "zz"]))
            items.append({"partition": "Default", "transactionId": txn, "status": draw(st.sampled_from(STATUSES))})
        elif kind == 6:
            items.append({"partition": "Default", "offset": draw(st.integers(0, count)),
                          "status": draw(st.sampled_from(STATUSES))})
        elif kind == 7:
            items.append({"partition": draw(st.sampled_from(["Default", "p1"])), "queue": draw(st.sampled_from(["q", "r", None])),
                          "transactionId": txns[in_order % count], "status": "completed"})
        elif kind == 8:
            items.append({"partition": "Default", "transactionId": txns[in_order % count], "status": "completed",
                          "offset": in_order % count})
        else:
            items.append({"partition": "Default", "transactionId": txns[in_order % count],
                          "status": "completed", "error": "e"})
    later = draw(st.sampled_from([1, 300_001]))  # 300 s: past the lease, every item refused
    return txns, window_s, items, later


@given(ack_case())
@SEQUENCE_SETTINGS
def test_an_ack_command_answers_and_settles_as_the_item_by_item_path(case):
    txns, window_s, items, later = case
    command = shipped({"op": "ack", "now": T0 + later, "consumerGroup": None, "leaseId": "L",
                       "acknowledgments": items})
    applied, reference, unread = (leased_state(txns, window_s) for _ in range(3))
    answer = applied.apply(command)
    assert answer["results"] == reference_ack(reference, shipped(items), T0 + later)
    unread.answering = False
    assert unread.apply(command) == {"results": []}
    assert applied.broker.to_wire() == reference.broker.to_wire() == unread.broker.to_wire()
