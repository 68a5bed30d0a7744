"""The reference model's consumption (see timer_model.py): pops in queue mode and for named
consumer groups, one lease per partition and its expiry, prefix acks, and the answers to a retried
ack of a lease its acks released. TimerModel's base: it reads the model's clock, queues, released
leases, advance() and consumption().
"""

from model_contract import (
    ACK_RETRY_MEMORY_MS,
    FIRST_DELIVERY_ATTEMPT,
    QUEUE_MODE_GROUP,
    RETRIED_ACK_ANSWERS_AS_THE_FIRST,
    is_expired,
)


class ConsumptionModel:
    # ------------------------------------------------------------------------- pop and ack
    def free_expired_lease(self, used):
        lease = used["lease"]
        if lease is not None and is_expired(lease["expiresAt"], self.clock):
            used["lease"] = None

    def has_deliverable(self, part, group):
        used = self.consumption(part, group)
        self.free_expired_lease(used)
        return used["lease"] is None and used["cursor"] < len(part["messages"])

    def pop(self, now, queue_name, partition_name, batch, lease_id, auto_ack, group=None):
        self.advance(now)
        nothing = {"leaseId": None, "messages": []}
        if queue_name not in self.queues:
            return nothing
        partitions = self.queues[queue_name]["partitions"]
        if partition_name is not None:
            if (partition_name not in partitions
                    or not self.has_deliverable(partitions[partition_name], group)):
                return nothing
            chosen = partition_name
        else:
            chosen = None
            for name in sorted(partitions):
                if self.has_deliverable(partitions[name], group):
                    chosen = name
                    break
            if chosen is None:
                return nothing
        part = partitions[chosen]
        used = self.consumption(part, group)
        start = used["cursor"]
        offsets = list(range(start, min(start + batch, len(part["messages"]))))
        messages = []
        for offset in offsets:
            stored = part["messages"][offset]
            used["deliveries"][offset] = used["deliveries"].get(offset, FIRST_DELIVERY_ATTEMPT - 1) + 1
            messages.append({
                "transactionId": stored["transactionId"],
                "messageId": stored["messageId"],
                "queue": queue_name,
                "partition": chosen,
                "offset": offset,
                "leaseId": lease_id,
                "deliveryAttempt": used["deliveries"][offset],
                "payload": stored["payload"],
                "createdAt": stored["createdAt"],
                "consumerGroup": QUEUE_MODE_GROUP if group is None else group,
                "traceId": stored["traceId"],
            })
        if auto_ack:
            used["cursor"] = start + len(offsets)
        else:
            lease_time_ms = self.queues[queue_name]["options"]["leaseTime"] * 1000
            used["lease"] = {"leaseId": lease_id, "expiresAt": self.clock + lease_time_ms,
                             "offsets": offsets, "settled": []}
        return {"leaseId": lease_id, "messages": messages}

    def find_live_lease(self, lease_id):
        """(queue, partition name, the group's consumption) holding this live lease, or None."""
        for queue_name, q in self.queues.items():
            for name, part in q["partitions"].items():
                for used in part["groups"].values():
                    self.free_expired_lease(used)
                    lease = used["lease"]
                    if lease is not None and lease["leaseId"] == lease_id:
                        return queue_name, name, used
        return None

    def retried_ack(self, index, lease_id, item):
        """The answer to an item no live lease covers: a repeat of a released lease's ack, or not."""
        released = self.released_leases.get(lease_id) if RETRIED_ACK_ANSWERS_AS_THE_FIRST else None
        if released is None or released[3] <= self.clock:
            return {"index": index, "success": False, "error": "invalid_lease", "dlq": False}
        return self.repeated_ack(index, item, *released[:3])

    @staticmethod
    def repeated_ack(index, item, queue, partition, settled):
        """An item naming a message its lease already settled (completed) answers as the first
        ack did; with another status it is refused saying so."""
        if (item["queue"], item["partition"]) != (queue, partition) or item["offset"] not in settled:
            return {"index": index, "success": False, "error": "invalid_lease", "dlq": False}
        if item["status"] == "completed":
            return {"index": index, "success": True, "dlq": False}
        return {"index": index, "success": False, "error": "invalid_lease", "dlq": False,
                "message": "already settled as completed"}

    def ack(self, now, lease_id, acknowledgments):
        """Completed acks of a live lease; each item {"queue", "partition", "offset", "status"}.
        Another status only names a lease no longer live (a retry of a released lease's ack)."""
        self.advance(now)
        results = []
        for index, item in enumerate(acknowledgments):
            holder = self.find_live_lease(lease_id)
            if holder is None:
                results.append(self.retried_ack(index, lease_id, item))
                continue
            if item["offset"] in holder[2]["lease"]["settled"]:
                results.append(self.repeated_ack(index, item, holder[0], holder[1],
                                                 holder[2]["lease"]["settled"]))
                continue
            assert item["status"] == "completed", "the model settles completed acks only"
            if (holder[0] != item["queue"] or holder[1] != item["partition"]
                    or item["offset"] not in holder[2]["lease"]["offsets"]):
                results.append({"index": index, "success": False, "error": "invalid_lease",
                                "dlq": False})
                continue
            used = holder[2]
            lease = used["lease"]
            if item["offset"] not in lease["settled"]:
                lease["settled"].append(item["offset"])
            while used["cursor"] in lease["settled"]:
                used["cursor"] += 1
            if sorted(lease["settled"]) == sorted(lease["offsets"]):
                used["lease"] = None
                self.released_leases[lease_id] = (holder[0], holder[1], list(lease["offsets"]),
                                                  self.clock + ACK_RETRY_MEMORY_MS)
            results.append({"index": index, "success": True, "dlq": False})
        return {"results": results}
