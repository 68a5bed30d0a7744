"""A plain reference model of the parts of TenantState the property tests drive.

Written from docs/commands.md and docs/spec.md sections 1-3, not from queen_raft/state, and as plainly
as possible: dicts and lists, linear scans, no indexes. It is slow on purpose; it only has to be
obviously right for the few dozen timers and messages a Hypothesis run makes.

What it models: the group clock; timers keyed by (queue, timerKey) with upsert, cancel, the
pending quota, the duplicate-key refusal, fires at or after deliverAt in (dueAt, queue, timerKey)
order under the fireBatch and fireMaxBytes bounds, permanent fire failures (payload over the
queue's maxPayloadBytes) with exponential backoff and the `__timer__` DLQ; partitions as lists of
messages with a per-partition dedup window; queue-mode consumption with one lease per partition,
a cursor, prefix acks and redelivery after the lease expires, for the queue-mode group and for
named consumer groups, each with its own cursor and leases; a retried ack of a lease its acks
released answers as the first did (or is refused when it names another status); a cancel or
peek of a key whose timer fired within its queue's dedup window answers where the message went
(`fired` with its partition and offset, `dead_lettered`), and `absent` once the window is over.

Where the contract leaves a choice open, the choice is a named constant in model_contract.py, so a
disagreement with the state is one line to find and one line to flip. Pops and acks are in
consumption_model.py, the base of TimerModel.
"""

from consumption_model import ConsumptionModel
from model_contract import (
    DEDUP_BEFORE_PAYLOAD_LIMIT,
    DEFAULT_PARTITION,
    DEFAULT_POLICY,
    DEFAULT_QUEUE_OPTIONS,
    IMMEDIATE_FIRE_ONLY_THIS_BATCH,
    QUEUE_MODE_GROUP,
    TIMER_DLQ_GROUP,
    is_expired,
    utf8_order,
)


class TimerModel(ConsumptionModel):
    def __init__(self):
        self.clock = 0
        # (queue, timerKey) -> {"queue", "timerKey", "partition", "deliverAt", "dueAt", "txn",
        #                       "messageId", "payload", "producerSub", "attempts", "lastError"}
        self.pending_timers = {}
        # queue -> {"options": dict, "partitions": {name: partition}, "dlq": [rows]}
        # partition: {"messages": [...], "dedup": {txn: {"offset", "messageId", "expiresAt"}},
        #             "groups": {consumer group: consumption}}
        # consumption: {"cursor": next offset not yet completed,
        #               "deliveries": {offset: times delivered},
        #               "lease": None | {"leaseId", "expiresAt", "offsets": [...], "settled": [...]}}
        self.queues = {}
        self.billed = 0
        self.fired_counts = {"appended": 0, "duplicate": 0, "failed": 0, "dlq": 0}
        # Facts the invariants need and the log alone does not carry.
        self.cancelled_message_ids = []
        self.deliver_at_by_message_id = {}
        # (queue, partition, txn) -> times the txn was appended again after its window expired.
        self.reappended_after_expiry = {}
        # leaseId -> (queue, partition, offsets, forgotten at) of each lease released by its
        # (completed) acks.
        self.released_leases = {}
        # (queue, timerKey) -> where the key's last fire went: {"status", "txn", "partition",
        # "offset" (fired only), "messageId", "firedAt", "expiresAt"}.
        self.fires = {}

    # ----------------------------------------------------------------------------- clock
    def advance(self, now):
        self.clock = max(self.clock, now)

    # ---------------------------------------------------------------------- queues, push path
    def queue(self, name):
        if name not in self.queues:
            self.queues[name] = {"options": dict(DEFAULT_QUEUE_OPTIONS), "partitions": {}, "dlq": []}
        return self.queues[name]

    def partition(self, queue_name, partition_name):
        partitions = self.queue(queue_name)["partitions"]
        if partition_name not in partitions:
            partitions[partition_name] = {"messages": [], "dedup": {}, "groups": {}}
        return partitions[partition_name]

    def consumption(self, part, group):
        """A group's cursor, deliveries and lease on one partition; a new group starts at 0."""
        name = QUEUE_MODE_GROUP if group is None else group
        if name not in part["groups"]:
            part["groups"][name] = {"cursor": 0, "deliveries": {}, "lease": None}
        return part["groups"][name]

    def live_dedup_entry(self, part, txn):
        entry = part["dedup"].get(txn)
        if entry is None or is_expired(entry["expiresAt"], self.clock):
            return None
        return entry

    def push_one(self, queue_name, partition_name, txn, message_id, payload, producer_sub, trace_id):
        """The push path shared by `push` and fires: (status, offset, messageId)."""
        options = self.queue(queue_name)["options"]
        too_large = len(payload) > options["maxPayloadBytes"]
        if too_large and not DEDUP_BEFORE_PAYLOAD_LIMIT:
            return "payload_too_large", None, message_id
        part = self.partition(queue_name, partition_name)
        original = self.live_dedup_entry(part, txn)
        if original is not None:
            return "duplicate", original["offset"], original["messageId"]
        if too_large:
            return "payload_too_large", None, message_id
        if txn in part["dedup"]:
            key = (queue_name, partition_name, txn)
            self.reappended_after_expiry[key] = self.reappended_after_expiry.get(key, 0) + 1
        offset = len(part["messages"])
        part["messages"].append({
            "offset": offset,
            "transactionId": txn,
            "messageId": message_id,
            "payload": payload,
            "createdAt": self.clock,
            "producerSub": producer_sub,
            "traceId": trace_id,
        })
        part["dedup"][txn] = {
            "offset": offset,
            "messageId": message_id,
            "expiresAt": self.clock + options["dedupWindowSeconds"] * 1000,
        }
        return "queued", offset, message_id

    # ------------------------------------------------------------------------------ commands
    def configure(self, now, queue_name, options):
        self.advance(now)
        q = self.queue(queue_name)
        q["options"].update(options)
        return {"queue": queue_name, "options": dict(q["options"])}

    def barrier(self, now):
        self.advance(now)
        return {}

    def timers(self, now, producer_sub, ops, max_pending=None, policy=None, check_payload_bound=False):
        self.advance(now)
        keys = [(op["queue"], op["timerKey"]) for op in ops]
        if len(set(keys)) != len(keys):
            return {"error": "timers_bad_request"}
        if check_payload_bound:
            # The queue's options in force (a queue never configured: the defaults); no queue is
            # created by the check. Payloads here are never zstd.
            for index, op in enumerate(ops):
                queue = self.queues.get(op["queue"])
                options = DEFAULT_QUEUE_OPTIONS if queue is None else queue["options"]
                if op["op"] != "cancel" and len(op["payload"]) > options["maxPayloadBytes"]:
                    return {"error": "payload_too_large", "index": index}
        pending_after = set(self.pending_timers)
        adds = False
        for op in ops:
            key = (op["queue"], op["timerKey"])
            if op["op"] == "cancel":
                pending_after.discard(key)
            else:
                if key not in self.pending_timers:
                    adds = True
                pending_after.add(key)
        if max_pending is not None and adds and len(pending_after) > max_pending:
            return {"error": "timers_quota_exceeded"}

        results = []
        scheduled_keys = []
        for op in ops:
            key = (op["queue"], op["timerKey"])
            if op["op"] == "cancel":
                existing = self.pending_timers.pop(key, None)
                if existing is None:
                    results.append(self.cancel_without_timer(op))
                else:
                    self.fires.pop(key, None)
                    self.cancelled_message_ids.append(existing["messageId"])
                    txn = op.get("txn") if op.get("txn") is not None else existing["txn"]
                    results.append({"ok": True, "status": "cancelled", "queue": op["queue"],
                                    "timerKey": op["timerKey"], "txn": txn,
                                    "requestTxn": op.get("txn")})
            else:
                status = "rescheduled" if key in self.pending_timers else "scheduled"
                if key in self.pending_timers:
                    # A replaced timer never fires: its messageId is as dead as a cancelled one.
                    self.cancelled_message_ids.append(self.pending_timers[key]["messageId"])
                deliver_at = self.clock + op["delayMs"]
                self.pending_timers[key] = {
                    "queue": op["queue"],
                    "timerKey": op["timerKey"],
                    "partition": op.get("partition", DEFAULT_PARTITION),
                    "deliverAt": deliver_at,
                    "dueAt": deliver_at,
                    "txn": op["txn"],
                    "messageId": op["messageId"],
                    "payload": op["payload"],
                    "producerSub": producer_sub,
                    "attempts": 0,
                    "lastError": None,
                }
                self.deliver_at_by_message_id[op["messageId"]] = deliver_at
                self.billed += 1
                scheduled_keys.append(key)
                results.append({"ok": True, "status": status, "queue": op["queue"],
                                "timerKey": op["timerKey"], "txn": op["txn"],
                                "messageId": op["messageId"], "deliverAt": deliver_at})

        if IMMEDIATE_FIRE_ONLY_THIS_BATCH:
            due_now = [self.pending_timers[k] for k in scheduled_keys
                       if k in self.pending_timers and self.pending_timers[k]["dueAt"] <= self.clock]
            due_now.sort(key=lambda t: (t["dueAt"], t["queue"], t["timerKey"]))
            full_policy = dict(DEFAULT_POLICY, **(policy or {}))
            for timer in due_now:
                self.fire(timer, full_policy)
        else:
            self.fire_due(policy)
        return {"results": results}

    def cancel_without_timer(self, op):
        fire = self.remembered_fire(op["queue"], op["timerKey"])
        if fire is None:
            return {"ok": False, "status": "absent", "queue": op["queue"], "timerKey": op["timerKey"],
                    "txn": op.get("txn"), "requestTxn": op.get("txn")}
        return {"ok": False, "queue": op["queue"], "timerKey": op["timerKey"], **fire,
                "requestTxn": op.get("txn")}

    def remembered_fire(self, queue, key):
        """Where the key's last fire went, without expiresAt; None when none is remembered."""
        fire = self.fires.get((queue, key))
        if fire is None or is_expired(fire["expiresAt"], self.clock):
            return None
        return {k: v for k, v in fire.items() if k != "expiresAt"}

    def remember_fire(self, timer, status, offset, message_id):
        window_ms = self.queue(timer["queue"])["options"]["dedupWindowSeconds"] * 1000
        if window_ms == 0:
            return
        fire = {"status": status, "txn": timer["txn"], "partition": timer["partition"],
                "messageId": message_id, "firedAt": self.clock, "expiresAt": self.clock + window_ms}
        if offset is not None:
            fire["offset"] = offset
        self.fires[(timer["queue"], timer["timerKey"])] = fire

    def due_timers_in_order(self):
        due = [t for t in self.pending_timers.values() if t["dueAt"] <= self.clock]
        due.sort(key=lambda t: (t["dueAt"], t["queue"], t["timerKey"]))
        return due

    def fire(self, timer, policy):
        """One fire through the push path; returns "appended" | "duplicate" | "failed" | "dlq"."""
        key = (timer["queue"], timer["timerKey"])
        status, offset, message_id = self.push_one(
            timer["queue"], timer["partition"], timer["txn"], timer["messageId"],
            timer["payload"], timer["producerSub"], None)
        if status in ("queued", "duplicate"):
            self.remember_fire(timer, "fired", offset, message_id)
        if status == "queued":
            del self.pending_timers[key]
            outcome = "appended"
        elif status == "duplicate":
            del self.pending_timers[key]
            self.cancelled_message_ids.append(timer["messageId"])
            outcome = "duplicate"
        else:
            timer["attempts"] += 1
            timer["lastError"] = status
            if timer["attempts"] >= policy["maxAttempts"]:
                del self.pending_timers[key]
                self.cancelled_message_ids.append(timer["messageId"])
                self.remember_fire(timer, "dead_lettered", None, timer["messageId"])
                self.queue(timer["queue"])["dlq"].append({
                    "queue": timer["queue"], "partition": timer["partition"],
                    "consumerGroup": TIMER_DLQ_GROUP, "offset": -1,
                    "transactionId": timer["txn"], "messageId": timer["messageId"],
                })
                outcome = "dlq"
            else:
                backoff = policy["backoffMinMs"] * 2 ** (timer["attempts"] - 1)
                timer["dueAt"] = self.clock + min(backoff, policy["backoffMaxMs"])
                outcome = "failed"
        self.fired_counts[outcome] += 1
        return outcome

    def fire_due(self, policy):
        full_policy = dict(DEFAULT_POLICY, **(policy or {}))
        taken = []
        taken_bytes = 0
        for timer in self.due_timers_in_order():
            if len(taken) >= full_policy["fireBatch"]:
                break
            if taken and taken_bytes + len(timer["payload"]) > full_policy["fireMaxBytes"]:
                break
            taken.append(timer)
            taken_bytes += len(timer["payload"])
        answer = {"fired": 0, "appended": 0, "duplicate": 0, "failed": 0, "dlq": 0, "lagsMs": [], "firedByQueue": {}}
        for timer in taken:
            outcome = self.fire(timer, full_policy)
            answer["fired"] += 1
            answer["firedByQueue"][timer["queue"]] = answer["firedByQueue"].get(timer["queue"], 0) + 1
            answer[outcome] += 1
            if outcome in ("appended", "duplicate"):
                answer["lagsMs"].append(self.clock - timer["deliverAt"])
        answer["moreDue"] = len(self.due_timers_in_order()) > 0
        answer["nextDueAt"] = self.next_due_at()
        return answer

    def tick(self, now, policy=None):
        self.advance(now)
        return self.fire_due(policy)

    def push(self, now, producer_sub, items):
        self.advance(now)
        results = []
        for index, item in enumerate(items):
            self.billed += 1
            status, offset, message_id = self.push_one(
                item["queue"], item["partition"], item["transactionId"], item["messageId"],
                item["payload"], producer_sub, item.get("traceId"))
            result = {"index": index, "messageId": message_id,
                      "transactionId": item["transactionId"], "queue": item["queue"],
                      "partition": item["partition"]}
            if status in ("queued", "duplicate"):
                result["status"] = status
                result["offset"] = offset
            else:
                result["status"] = "error"
                result["error"] = status
                result["offset"] = None
            results.append(result)
        return {"results": results}

    # --------------------------------------------------------------------------------- reads
    def next_due_at(self):
        if not self.pending_timers:
            return None
        return min(t["dueAt"] for t in self.pending_timers.values())

    def deliverable(self, queue_name, partition_name, group=None):
        if queue_name not in self.queues:
            return False
        part = self.queues[queue_name]["partitions"].get(partition_name)
        if part is None:
            return False
        used = part["groups"].get(QUEUE_MODE_GROUP if group is None else group,
                                  {"cursor": 0, "lease": None})
        lease = used["lease"]
        if lease is not None and not is_expired(lease["expiresAt"], self.clock):
            return False
        return used["cursor"] < len(part["messages"])

    def messages(self, queue_name, partition_name):
        q = self.queues.get(queue_name)
        if q is None or partition_name not in q["partitions"]:
            return []
        return q["partitions"][partition_name]["messages"]

    def timer_keys(self, queue_name):
        keys = [k for (q, k) in self.pending_timers if q == queue_name]
        return sorted(keys, key=utf8_order)
