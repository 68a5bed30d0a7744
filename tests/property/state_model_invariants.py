"""The invariants of the state-against-model test (test_state_model.py), checked after every step:
the state's own, and what it shows through its read helpers (partition logs, timers and their
remembered fires, listings, deliverability, timer dead letters) against the model. A base of the
machine: it reads the machine's state and model.
"""

from hypothesis import event
from hypothesis.stateful import invariant

from model_contract import utf8_order
from state_model_draws import (
    DISTINCT_GROUPS,
    FETCH_PAGE,
    LIST_PAGE,
    LIST_PREFIXES,
    PARTITIONS,
    QUEUES,
    TIMER_KEYS,
    assert_matches,
)


class ModelInvariants:
    # -------------------------------------------------------------------------- invariants
    def state_log(self, queue, partition):
        records = []
        while True:
            page = self.state.fetch(queue, partition, len(records), FETCH_PAGE)
            assert len(page) <= FETCH_PAGE, page
            if not page:
                return records
            records.extend(page)

    @invariant()
    def the_states_own_invariants_hold(self):
        # Its indexes agree with its collections and its counters with what they count
        # (queen_raft/state/invariants.py), whatever the answers compared below.
        self.state.check_invariants()

    @invariant()
    def group_clock_is_the_max_of_proposals(self):
        clock = self.state.clock() if callable(self.state.clock) else self.state.clock
        assert clock == self.model.clock

    @invariant()
    def partition_logs_agree_and_hold_the_invariants(self):
        cancelled = set(self.model.cancelled_message_ids)
        for queue in QUEUES:
            for partition in PARTITIONS:
                records = self.state_log(queue, partition)
                # Offsets gapless from 0.
                assert [r["offset"] for r in records] == list(range(len(records))), records
                # A txn at most once per partition, unless the model saw its window expire.
                seen = {}
                for r in records:
                    seen[r["transactionId"]] = seen.get(r["transactionId"], 0) + 1
                for txn, count in seen.items():
                    allowed = 1 + self.model.reappended_after_expiry.get((queue, partition, txn), 0)
                    assert count <= allowed, f"{queue}/{partition}: txn {txn} appended {count} times"
                for r in records:
                    # Nothing appended for a timer after an acknowledged cancel (or replacement).
                    assert r["messageId"] not in cancelled, f"cancelled timer fired: {r!r}"
                    # Nothing fires before its deliverAt.
                    deliver_at = self.model.deliver_at_by_message_id.get(r["messageId"])
                    if deliver_at is not None:
                        assert r["createdAt"] >= deliver_at, f"fired early: {r!r} < {deliver_at}"
                want = [{"offset": m["offset"], "transactionId": m["transactionId"],
                         "messageId": m["messageId"], "payload": m["payload"],
                         "createdAt": m["createdAt"]}
                        for m in self.model.messages(queue, partition)]
                assert_matches(records, want, f"fetch {queue}/{partition}")

    @invariant()
    def timers_agree(self):
        assert self.state.next_due_at() == self.model.next_due_at()
        counters = self.state.counters()
        assert counters["pendingTimers"] == len(self.model.pending_timers)
        assert_matches(counters["fired"], self.model.fired_counts, "counters.fired")
        assert counters["billedMessages"] == self.model.billed
        for queue in QUEUES:
            for key in TIMER_KEYS:
                got = self.state.peek_timer(queue, key)
                timer = self.model.pending_timers.get((queue, key))
                if timer is None:
                    assert got is None, f"peek {queue}/{key}: {got!r}, model has no timer"
                    self.fire_answer_agrees(queue, key)
                    continue
                assert_matches(got, {
                    "queue": queue, "timerKey": key, "partition": timer["partition"],
                    "deliverAt": timer["deliverAt"], "txn": timer["txn"],
                    "messageId": timer["messageId"], "payload": timer["payload"],
                    "attempts": timer["attempts"],
                }, f"peek {queue}/{key}")
                # Its text is the state's own; that there is one (after a failed fire, cleared by
                # a reschedule) is the contract.
                assert (got["lastError"] is None) == (timer["lastError"] is None), got

    def fire_answer_agrees(self, queue, key):
        """A key with no pending timer: where its remembered fire went, as the model says; a
        dead letter's dlqId names the key's row in the DLQ."""
        got = self.state.fired_timer(queue, key)
        want = self.model.remembered_fire(queue, key)
        if want is None:
            assert got is None, f"fired {queue}/{key}: {got!r}, the model remembers no fire"
            return
        assert_matches(got, want, f"fired {queue}/{key}")
        event(f"peek: {want['status']}")
        if want["status"] == "dead_lettered":
            row = next(r for r in self.state.dlq_list(queue, 1000) if r["dlqId"] == got["dlqId"])
            assert (row["timerKey"], row["transactionId"]) == (key, want["txn"]), row

    @invariant()
    def listing_pages_through_the_pending_keys_in_byte_order(self):
        for queue in QUEUES:
            listed = []
            after = None
            while True:
                page = self.state.list_timers(queue, after, LIST_PAGE)
                rows = page["rows"]
                assert len(rows) <= LIST_PAGE
                listed.extend(row["timerKey"] for row in rows)
                if not page["truncated"]:
                    break
                assert rows, "truncated page without rows"
                after = page["nextAfter"]
                assert after == rows[-1]["timerKey"]
            assert listed == self.model.timer_keys(queue)
            assert listed == sorted(listed, key=utf8_order)
            for prefix in LIST_PREFIXES:
                assert self.listed_with_prefix(queue, prefix) == [
                    key for key in self.model.timer_keys(queue) if key.startswith(prefix)], prefix

    def listed_with_prefix(self, queue, prefix):
        listed, after = [], None
        while True:
            page = self.state.list_timers(queue, after, LIST_PAGE, prefix)
            listed.extend(row["timerKey"] for row in page["rows"])
            if not page["truncated"]:
                return listed
            after = page["nextAfter"]

    @invariant()
    def deliverable_agrees_with_pop(self):
        for queue in QUEUES:
            for partition in PARTITIONS:
                for group in DISTINCT_GROUPS:
                    assert (self.state.deliverable(queue, partition, group)
                            == self.model.deliverable(queue, partition, group)), (queue, partition,
                                                                                  group)

    @invariant()
    def timer_dead_letters_agree(self):
        for queue in QUEUES:
            want = self.model.queues.get(queue, {"dlq": []})["dlq"]
            rows = self.state.dlq_list(queue, 1000)
            fields = ("messageId", "transactionId", "partition", "consumerGroup", "offset")
            assert (sorted(tuple(r[f] for f in fields) for r in rows)
                    == sorted(tuple(w[f] for f in fields) for w in want)), rows
