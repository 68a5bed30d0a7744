"""KV namespaces: (ns, key) -> value, version, expiry on the group clock.

Choices the contract leaves open (docs/spec.md lists those that reach the wire):

- A batch runs its ops in order against an overlay of the keys it touches; a failed `check` or
  `putIfAbsent` on a live key refuses the batch (`kv_precondition`, with the op's index) and the
  overlay is dropped, so nothing changes. Otherwise the overlay is written back.
- Versions start at 1 on a key that is absent (never written, deleted or expired) and grow by one
  per write (`put`, `putIfAbsent`, `incr`).
- `ttlSeconds` None on a `put` means no expiry (it clears an earlier one); on `incr` it keeps the
  expiry in force. An expired key reads as absent and is dropped by the next kv entry
  (`prune`, driven by an index ordered by expiry), so memory stays bounded by the live keys.
- `incr` on an absent key starts from 0; on a value that is not an integer, or past the 64-bit
  range (msgpack could not snapshot it), it refuses the batch with `bad_request`. `by` defaults
  to 1.
- `check` with `expectedVersion` None asserts the key is absent; otherwise that its live version
  equals it.
- Every op answers the row after the op: `{ns, key, found, value, version, expiresAt}`; a delete
  answers `found` = whether a live key was deleted, and no value.
"""

from __future__ import annotations

import msgpack
from sortedcontainers import SortedList

from .limits import KV_INT_MAX, KV_INT_MIN, MS_PER_SECOND, QUEUE_INT_OPTION_MAX
from .refusal import is_int, require
from .values import kv_value_problem

KV_OPS = frozenset({"get", "put", "putIfAbsent", "delete", "incr", "check"})
VALUE_OPS = frozenset({"put", "putIfAbsent"})

# Entry layout: [value, version, expiresAt | None].
_ABSENT = None


def validate_kv_op(op: object, index: int) -> None:
    require(isinstance(op, dict), "bad_request", "kv op must be an object", index)
    require(op.get("op") in KV_OPS, "bad_request", "unknown kv op", index)
    require(isinstance(op.get("ns"), str) and isinstance(op.get("key"), str), "bad_request",
            "ns and key must be strings", index)
    ttl = op.get("ttlSeconds")
    require(ttl is None or (is_int(ttl) and 0 < ttl <= QUEUE_INT_OPTION_MAX), "bad_request",
            "ttlSeconds must be a positive integer", index)
    require(op.get("by", 1) is not None and is_int(op.get("by", 1)), "bad_request",
            "by must be an integer", index)
    expected = op.get("expectedVersion")
    require(expected is None or is_int(expected), "bad_request",
            "expectedVersion must be an integer", index)
    if op["op"] in VALUE_OPS:
        # Refused here too, not only by the API: a value that cannot be snapshotted would make
        # every later snapshot of every replica fail, even one from an entry proposed long ago.
        problem = kv_value_problem(op.get("value"))
        require(problem is None, "bad_request", problem or "", index)


class KvStore:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], list] = {}
        # (expiresAt, ns, key) of every entry with an expiry.
        self.expiry = SortedList()

    def live(self, ns: str, key: str, now: int) -> list | None:
        entry = self.entries.get((ns, key))
        if entry is None or (entry[2] is not None and entry[2] <= now):
            return None
        return entry

    def prune(self, now: int) -> None:
        expiry = self.expiry
        while expiry and expiry[0][0] <= now:
            expires_at, ns, key = expiry.pop(0)
            entry = self.entries.get((ns, key))
            if entry is not None and entry[2] == expires_at:
                del self.entries[(ns, key)]

    def plan(self, ops: list[dict], now: int, index_base: int = 0,
             max_answer_bytes: int | None = None) -> tuple[dict, list[dict]]:
        """Run the batch on an overlay: `(overlay, results)`, or raise Refusal (nothing changed).
        With `max_answer_bytes`, the values the results carry (stored msgpack bytes) may not pass
        it once there is more than one result (`answer_too_large`, blaming the op that passed it)."""
        overlay: dict[tuple[str, str], list | None] = {}
        results = []
        answer_bytes = 0
        for index, op in enumerate(ops):
            ns, key = op["ns"], op["key"]
            name = (ns, key)
            if name in overlay:
                current = overlay[name]
            else:
                current = self.live(ns, key, now)
            kind = op["op"]
            version = 0 if current is None else current[1]
            if kind == "check":
                expected = op.get("expectedVersion")
                require((current is None) if expected is None else (version == expected),
                        "kv_precondition", f"check failed on {ns}/{key}", index_base + index)
            elif kind == "putIfAbsent":
                require(current is None, "kv_precondition", f"{ns}/{key} exists",
                        index_base + index)
                current = [op.get("value"), 1, self._expires(op, now)]
            elif kind == "put":
                current = [op.get("value"), version + 1, self._expires(op, now)]
            elif kind == "incr":
                base = 0 if current is None else current[0]
                require(is_int(base), "bad_request", f"{ns}/{key} is not an integer",
                        index_base + index)
                ttl = op.get("ttlSeconds")
                expires_at = (None if current is None else current[2]) if ttl is None \
                    else now + ttl * MS_PER_SECOND
                total = base + op.get("by", 1)
                require(KV_INT_MIN <= total <= KV_INT_MAX, "bad_request",
                        f"{ns}/{key} would leave the 64-bit range", index_base + index)
                current = [total, version + 1, expires_at]
            elif kind == "delete":
                results.append({"ns": ns, "key": key, "found": current is not None,
                                "value": None, "version": None, "expiresAt": None})
                overlay[name] = _ABSENT
                continue
            if kind != "get" and kind != "check":
                overlay[name] = current
            results.append(self._row(ns, key, current))
            if max_answer_bytes is not None and current is not None:
                answer_bytes += len(msgpack.packb(current[0], use_bin_type=True))
                require(answer_bytes <= max_answer_bytes or len(results) == 1, "answer_too_large",
                        f"the answer would carry over {max_answer_bytes} bytes of values "
                        f"(MAX_ANSWER_BYTES); read fewer keys per call", index_base + index)
        return overlay, results

    def commit(self, overlay: dict) -> None:
        for (ns, key), entry in overlay.items():
            if entry is None:
                self.entries.pop((ns, key), None)
                continue
            self.entries[(ns, key)] = entry
            if entry[2] is not None:
                self.expiry.add((entry[2], ns, key))

    def get(self, ns: str, key: str, now: int) -> dict | None:
        entry = self.live(ns, key, now)
        return None if entry is None else self._row(ns, key, entry)

    @staticmethod
    def _expires(op: dict, now: int) -> int | None:
        ttl = op.get("ttlSeconds")
        return None if ttl is None else now + ttl * MS_PER_SECOND

    @staticmethod
    def _row(ns: str, key: str, entry: list | None) -> dict:
        if entry is None:
            return {"ns": ns, "key": key, "found": False, "value": None, "version": None,
                    "expiresAt": None}
        return {"ns": ns, "key": key, "found": True, "value": entry[0], "version": entry[1],
                "expiresAt": entry[2]}

    def to_wire(self) -> list:
        return [
            sorted([ns, key, *entry] for (ns, key), entry in self.entries.items()),
            [list(item) for item in self.expiry],
        ]

    @classmethod
    def from_wire(cls, wire: list) -> KvStore:
        entries, expiry = wire
        store = cls()
        store.entries = {(ns, key): [value, version, expires_at]
                         for ns, key, value, version, expires_at in entries}
        store.expiry = SortedList(tuple(item) for item in expiry)
        return store
