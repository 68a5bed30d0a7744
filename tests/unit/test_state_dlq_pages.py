"""Dead-letter pages: filing order across queues, the `after` cursor, bounds, and snapshots."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queen_raft.state import TenantState
from queen_raft.state.broker import Broker
from queen_raft.state.dlq_pages import dlq_seq_of

T0 = 1_700_000_000_000


def file(broker: Broker, queue: str) -> str:
    """Files one dead letter in `queue` the way a failed ack does; its dlqId."""
    seq = broker.dlq_seq + 1
    return broker.file_row(broker.queue(queue), "Default", "g", seq, f"txn-{seq}", f"m-{seq}", b"{}", T0, None, None,
                           False, "poison", 1, T0)


def ids(page: dict) -> list[str]:
    return [row["dlqId"] for row in page["rows"]]


def test_dlq_seq_of_reads_only_the_ids_the_broker_mints():
    assert [dlq_seq_of(text) for text in ("dlq-1", "dlq-0", "dlq-1234567890123")] == [1, 0, 1234567890123]
    assert [dlq_seq_of(text) for text in ("dlq-", "dlq-1x", "DLQ-1", "1", "dlq--1", "dlq-\u0661", " dlq-1")] == [None] * 7


def test_every_queue_is_listed_in_filing_order_numerically_not_by_name():
    state = TenantState()
    filed = [file(state.broker, name) for name in ["zeta", "alpha", "zeta", "mid"] * 3]  # dlq-1 .. dlq-12
    page = state.dlq_page(None, None, 100)
    assert ids(page) == filed and filed[8:10] == ["dlq-9", "dlq-10"]
    assert (page["truncated"], page["nextAfter"]) == (False, None)
    assert ids(state.dlq_page("zeta", None, 100)) == sorted(filed[0::4] + filed[2::4], key=dlq_seq_of)
    assert ids(state.dlq_page("nope", None, 100)) == []


def test_pages_follow_the_cursor_and_say_when_more_follow():
    state = TenantState()
    filed = [file(state.broker, name) for name in ["b", "a"] * 3]
    first = state.dlq_page(None, None, 4)
    assert ids(first) == filed[:4] and (first["truncated"], first["nextAfter"]) == (True, filed[3])
    rest = state.dlq_page(None, dlq_seq_of(first["nextAfter"]), 4)
    assert ids(rest) == filed[4:] and (rest["truncated"], rest["nextAfter"]) == (False, None)
    exact = state.dlq_page(None, None, 6)  # a page that ends with the last row is not truncated
    assert ids(exact) == filed and exact["truncated"] is False
    assert ids(state.dlq_page("a", dlq_seq_of(filed[1]), 1)) == [filed[3]]


def test_a_cursor_whose_row_was_replayed_continues_after_it():
    state = TenantState()
    filed = [file(state.broker, "q") for _ in range(4)]
    first = state.dlq_page("q", None, 2)
    answer = state.apply({"op": "dlq_replay", "now": T0, "dlqId": first["nextAfter"], "messageId": "replayed"})
    assert answer["status"] == "queued"
    assert ids(state.dlq_page("q", dlq_seq_of(first["nextAfter"]), 2)) == filed[2:]
    later = file(state.broker, "q")  # filed between pages: it comes last
    assert ids(state.dlq_page(None, dlq_seq_of(filed[2]), 10)) == [filed[3], later]


def test_dlq_list_is_the_first_page_and_the_limit_is_clamped():
    state = TenantState()
    filed = [file(state.broker, "q") for _ in range(3)]
    assert [row["dlqId"] for row in state.dlq_list("q", 2)] == filed[:2]
    assert len(state.dlq_page(None, None, 0)["rows"]) == 1  # clamped up to the minimum page


def test_pages_are_the_same_after_a_snapshot():
    state = TenantState()
    for name in ["b", "a", "c", "a", "b"]:
        file(state.broker, name)
    state.apply({"op": "dlq_replay", "now": T0, "dlqId": "dlq-2", "messageId": "replayed"})
    restored = TenantState.restore(state.snapshot())
    for queue in (None, "a", "b", "c"):
        for after in (0, 1, 2, 3):
            assert restored.dlq_page(queue, after, 2) == state.dlq_page(queue, after, 2)


# A step: file a row in one of three queues, or replay the n-th live row (modulo how many there are).
STEPS = st.lists(st.one_of(st.tuples(st.just("file"), st.sampled_from(["q1", "q2", "q3"])),
                           st.tuples(st.just("replay"), st.integers(0, 50))), max_size=60)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, page_size=st.integers(1, 7), queue=st.sampled_from([None, "q1", "q2"]))
def test_paging_through_yields_every_live_row_once_in_id_order(steps, page_size, queue):
    state = TenantState()
    live: dict[str, str] = {}  # dlqId -> queue
    for kind, arg in steps:
        if kind == "file":
            live[file(state.broker, arg)] = arg
        elif live:
            dlq_id = sorted(live, key=dlq_seq_of)[arg % len(live)]
            assert state.apply({"op": "dlq_replay", "now": T0, "dlqId": dlq_id, "messageId": f"r-{dlq_id}"})["status"] == "queued"
            del live[dlq_id]
    seen: list[str] = []
    after = None
    while True:
        page = state.dlq_page(queue, after, page_size)
        assert len(page["rows"]) <= page_size
        seen += ids(page)
        if not page["truncated"]:
            assert page["nextAfter"] is None
            break
        assert page["nextAfter"] == seen[-1]
        after = dlq_seq_of(page["nextAfter"])
    assert seen == sorted((i for i, q in live.items() if queue in (None, q)), key=dlq_seq_of)
