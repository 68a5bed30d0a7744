"""A tiny deterministic state with TenantState's five members, for testing the Raft layer alone.

It keeps a key/value map, an apply counter and a timer table; `tick` fires due timers in
(dueAt, key) order into a `fired` list, bounded by the policy's fireBatch, and answers the same
shape as TenantState's tick (fired, lagsMs, moreDue, nextDueAt). `boom` raises, to prove that a
raising apply does not wedge the group.
"""

from __future__ import annotations

import time

import msgpack
import zstandard

DEFAULT_FIRE_BATCH = 256


class TimerLogState:
    # Seconds snapshot() sleeps before encoding (raft_node_fixture's --snapshot-delay-s). It runs in
    # the forked snapshot writer, so a test can hold writers alive across a kill or a stop.
    snapshot_delay_s = 0.0

    def __init__(self) -> None:
        self.clock = 0
        self.applied = 0
        self.values: dict[str, object] = {}
        self.timers: dict[str, int] = {}  # key -> dueAt
        self.fired: list[list] = []  # [key, dueAt, fired at (group now)]
        self.ops: dict[str, int] = {}

    def apply(self, command: dict) -> dict:
        self.clock = max(self.clock, int(command["now"]))
        self.applied += 1
        op = command["op"]
        self.ops[op] = self.ops.get(op, 0) + 1
        if op == "set":
            self.values[command["key"]] = command["value"]
            return {"ok": True, "applied": self.applied, "now": self.clock}
        if op == "timer":
            due_at = self.clock + int(command["delayMs"])
            self.timers[command["key"]] = due_at
            return {"ok": True, "deliverAt": due_at}
        if op == "timers":  # many timers due at the same instant, in one entry
            due_at = self.clock + int(command["delayMs"])
            for key in command["keys"]:
                self.timers[key] = due_at
            return {"ok": True, "deliverAt": due_at}
        if op == "tick":
            return self._tick(command.get("policy") or {})
        if op == "barrier":
            return {}
        if op == "boom":
            raise RuntimeError("boom: the test state raises on purpose")
        return {"error": "bad_request", "message": f"unknown op {op!r}"}

    def _tick(self, policy: dict) -> dict:
        batch = int(policy.get("fireBatch", DEFAULT_FIRE_BATCH))
        due = sorted((d, k) for k, d in self.timers.items() if d <= self.clock)
        taken = due[:batch]
        lags = []
        for due_at, key in taken:
            del self.timers[key]
            self.fired.append([key, due_at, self.clock])
            lags.append(self.clock - due_at)
        return {
            "now": self.clock,  # the tick's stamp: when the leader proposed it
            "fireBatch": batch,  # the batch the command carried (the leader's adaptive batch)
            "fired": len(taken),
            "lagsMs": lags,
            "moreDue": len(due) > len(taken),
            "nextDueAt": self.next_due_at(),
        }

    def next_due_at(self) -> int | None:
        return min(self.timers.values()) if self.timers else None

    def snapshot(self) -> bytes:
        if self.snapshot_delay_s:
            time.sleep(self.snapshot_delay_s)
        body = {
            "clock": self.clock,
            "applied": self.applied,
            "values": self.values,
            "timers": self.timers,
            "fired": self.fired,
            "ops": self.ops,
        }
        return zstandard.ZstdCompressor().compress(msgpack.packb(body, use_bin_type=True))

    @classmethod
    def restore(cls, data: bytes) -> "TimerLogState":
        body = msgpack.unpackb(zstandard.ZstdDecompressor().decompress(data), raw=False)
        state = cls()
        state.clock = body["clock"]
        state.applied = body["applied"]
        state.values = body["values"]
        state.timers = body["timers"]
        state.fired = body["fired"]
        state.ops = body["ops"]
        return state
