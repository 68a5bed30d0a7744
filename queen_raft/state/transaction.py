"""The checks of a `transaction` command's queue operations, made before any part of it applies.

A transaction applies all of its parts or none: these functions only read the state, and refuse
(with the index of the operation to blame) so that the caller changes nothing.
"""

from __future__ import annotations

from .broker import Broker
from .command_args import group_name
from .message_items import validate_ack_item, validate_push_item
from .refusal import Refusal, require

# Leases one transaction may require alive; the API's cap on the items of a transaction bounds it
# first (a larger list is a malformed command).
MAX_REQUIRED_LEASES = 4096


def split_operations(operations: list) -> tuple[list[dict], list[int], list[tuple[int, dict]]]:
    """The pushes, their indexes in `operations`, and the (index, ack) pairs, each checked in shape."""
    pushes: list[dict] = []
    push_indexes: list[int] = []
    acks: list[tuple[int, dict]] = []
    for index, operation in enumerate(operations):
        require(isinstance(operation, dict), "bad_request", "operation must be an object", index)
        kind = operation.get("type")
        if kind == "push":
            validate_push_item(operation, index)
            pushes.append(operation)
            push_indexes.append(index)
        elif kind == "ack":
            validate_ack_item(operation, index)
            require(operation.get("leaseId") is None or isinstance(operation["leaseId"], str),
                    "bad_request", "leaseId must be a string", index)
            group_name(operation.get("consumerGroup"))
            acks.append((index, operation))
        else:
            raise Refusal("bad_request", f"unknown operation type {kind!r}", index)
    return pushes, push_indexes, acks


def resolve_acks(broker: Broker, acks: list[tuple[int, dict]], now: int) -> list[tuple[int, tuple, dict]]:
    """Each ack's (index, (lease, offset), ack): every one must name a message its lease covers,
    and no two the same one."""
    resolved = []
    claimed: set[tuple[str, int]] = set()
    for index, operation in acks:
        group = group_name(operation.get("consumerGroup"))
        target = broker.resolve_ack(group, operation.get("leaseId"), operation, now)
        if target is None:
            # A retried transaction must not apply its other parts twice (broker.py).
            settlement = broker.remembered_settlement(group, operation.get("leaseId"), operation, now)
            if settlement is not None:
                raise Refusal("rejected_ack", f"already settled as {settlement[1]} under this lease", index)
        require(target is not None and (target[0].lease_id, target[1]) not in claimed,
                "rejected_ack", "the lease does not cover this message", index)
        claimed.add((target[0].lease_id, target[1]))
        resolved.append((index, target, operation))
    return resolved


def required_leases(command: dict) -> list[str]:
    """The command's `requiredLeases`, checked in shape (absent is none)."""
    required = command.get("requiredLeases")
    if required is None:
        return []
    require(isinstance(required, list) and len(required) <= MAX_REQUIRED_LEASES
            and all(isinstance(lease_id, str) for lease_id in required),
            "bad_request", f"requiredLeases must be a list of at most {MAX_REQUIRED_LEASES} strings")
    return required


def check_required_leases(broker: Broker, required: list[str], now: int) -> None:
    """Every required lease is alive at `now` (held, not expired), else the transaction is refused
    `rejected_ack`, naming the first that is not. A lease released by its acks is no longer alive:
    the messages it covered are settled."""
    for lease_id in required:
        lease = broker.leases.get(lease_id)
        require(lease is not None and lease.expires_at > now, "rejected_ack",
                f"required lease {lease_id!r} is not alive")
