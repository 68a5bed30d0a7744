"""A queue: its options, its partitions (by name) and its dead-letter rows.

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- Options are validated whole (`validate_options`); an unknown name, a bool where an integer is
  expected (msgpack keeps them apart, Python does not), a value below its minimum or above
  QUEUE_INT_OPTION_MAX is `bad_request`. `replace` starts from the defaults, `merge` from the
  options in force. A `configure` creates the queue when missing.
- `maxSize` counts unconsumed messages of the whole queue: per partition, the messages at or above
  the slowest group's cursor (every retained message when no group has read it). A push is refused
  with `queue_full` when that count is already `maxSize`.
- DLQ rows are kept in filing order under a tenant-wide id `dlq-<n>` (a counter in replicated
  state: the entries mint no id for them). Rows are not bounded by a count: each one stands for a
  message a producer paid for, and dropping it silently would lose it; they leave by `dlq_replay`.
"""

from __future__ import annotations

from bisect import insort

from .limits import (
    DEFAULT_QUEUE_OPTIONS,
    MS_PER_SECOND,
    QUEUE_BOOL_OPTIONS,
    QUEUE_INT_OPTION_MAX,
    QUEUE_INT_OPTION_MIN,
)
from .partition import Partition


def validate_options(options: object, base: dict) -> dict | str:
    """The options in force after applying `options` over `base`, or the reason they are refused."""
    if not isinstance(options, dict):
        return "options must be an object"
    merged = dict(base)
    for name, value in options.items():
        if name in QUEUE_BOOL_OPTIONS:
            if not isinstance(value, bool):
                return f"{name} must be a boolean"
        elif name in QUEUE_INT_OPTION_MIN:
            if isinstance(value, bool) or not isinstance(value, int):
                return f"{name} must be an integer"
            if not QUEUE_INT_OPTION_MIN[name] <= value <= QUEUE_INT_OPTION_MAX:
                return f"{name} must be between {QUEUE_INT_OPTION_MIN[name]} and {QUEUE_INT_OPTION_MAX}"
        else:
            return f"unknown option {name!r}"
        merged[name] = value
    return merged


class Queue:
    __slots__ = (
        "name", "options", "partitions", "partition_names", "dlq",
        # Options in the units `apply` uses, derived once per configure (hot on the fire path).
        "lease_ms", "retry_limit", "dlq_enabled", "dedup_window_ms", "delay_ms",
        "max_payload_bytes", "max_size", "retention_ms",
    )

    def __init__(self, name: str, options: dict | None = None) -> None:
        self.name = name
        self.partitions: dict[str, Partition] = {}
        # Sorted names: a pop without a partition takes the first deliverable one by name.
        self.partition_names: list[str] = []
        # dlqId -> row, in filing order.
        self.dlq: dict[str, dict] = {}
        self.set_options(dict(DEFAULT_QUEUE_OPTIONS) if options is None else options)

    def set_options(self, options: dict) -> None:
        self.options = options
        self.lease_ms = options["leaseTime"] * MS_PER_SECOND
        self.retry_limit = options["retryLimit"]
        self.dlq_enabled = options["deadLetterQueue"]
        self.dedup_window_ms = options["dedupWindowSeconds"] * MS_PER_SECOND
        self.delay_ms = options["delayedProcessing"] * MS_PER_SECOND
        self.max_payload_bytes = options["maxPayloadBytes"]
        self.max_size = options["maxSize"]
        self.retention_ms = options["retentionSeconds"] * MS_PER_SECOND

    def partition(self, name: str) -> Partition:
        """The partition, created when missing (pushes and fires create it implicitly)."""
        partition = self.partitions.get(name)
        if partition is None:
            partition = Partition(name)
            self.partitions[name] = partition
            insort(self.partition_names, name)
        return partition

    def unconsumed(self) -> int:
        return sum(partition.unconsumed() for partition in self.partitions.values())

    def admit(self, payload_len: int, queued_extra: int = 0) -> str | None:
        """Why a new message of this size cannot be appended now (an error code), or None.

        `queued_extra` counts messages a transaction plans to append before this one.
        """
        if payload_len > self.max_payload_bytes:
            return "payload_too_large"
        if self.max_size and self.unconsumed() + queued_extra >= self.max_size:
            return "queue_full"
        return None

    def to_wire(self) -> list:
        return [
            self.name,
            sorted(self.options.items()),
            [self.partitions[name].to_wire() for name in self.partition_names],
            list(self.dlq.values()),
        ]

    @classmethod
    def from_wire(cls, wire: list) -> Queue:
        name, options, partitions, dlq = wire
        queue = cls(name, dict(options))
        for partition_wire in partitions:
            partition = Partition.from_wire(partition_wire, name)
            queue.partitions[partition.name] = partition
            queue.partition_names.append(partition.name)
        queue.dlq = {row["dlqId"]: row for row in dlq}
        return queue
