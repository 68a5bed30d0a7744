"""The etcd peer's timer design (bench/peers/etcd_timers.py, etcd_sweeper.py) against an in-memory
model of etcd's KV (revisions, Txn compares, the gateway's JSON shapes): due timers fire once, a
reschedule or cancel wins, also when it lands between the sweeper's range and its fire Txn, and
only the elected sweeper fires."""

from __future__ import annotations

import base64

import pytest

from bench.peers import etcd_gateway as gw
from bench.peers import etcd_sweeper
from bench.peers import etcd_timers as keys
from bench.peers.etcd_sweeper import Sweeper

QUEUE = "q"


def _b(text: str) -> bytes:
    return base64.b64decode(text)


class FakeEtcd:
    """One etcd keyspace: each write Txn is one revision; compares and ranges as etcd does them."""

    def __init__(self):
        self.revision = 1
        self.data: dict[bytes, dict] = {}   # key -> {value, mod_revision, create_revision, lease}
        self.leases: set[int] = set()
        self.after_range = None             # a hook run after each range call (a concurrent writer)

    def _kv(self, key: bytes) -> dict:
        kv = self.data[key]
        return {"key": gw.b64(key), "value": gw.b64(kv["value"]), "mod_revision": str(kv["mod_revision"]),
                "create_revision": str(kv["create_revision"])}

    def _range(self, body: dict) -> dict:
        start = _b(body["key"])
        end = _b(body["range_end"]) if "range_end" in body else None
        found = sorted(k for k in self.data if (k == start if end is None else start <= k < end))
        limit = body.get("limit") or len(found)
        answer = {"header": {"revision": str(self.revision)}, "count": str(len(found))}
        if not body.get("count_only"):
            answer["kvs"] = [self._kv(k) for k in found[:limit]]
            answer["more"] = len(found) > limit
        return answer

    def _holds(self, compare: dict) -> bool:
        kv = self.data.get(_b(compare["key"]))
        field = {"MOD": "mod_revision", "CREATE": "create_revision"}[compare["target"]]
        return (kv[field] if kv else 0) == int(compare[field])

    def _check_keys(self, ops: list[dict]) -> None:
        """etcd refuses a Txn that puts one key twice, or puts a key it also deletes."""
        puts = [_b(op["request_put"]["key"]) for op in ops if "request_put" in op]
        deletes = {_b(op["request_delete_range"]["key"]) for op in ops if "request_delete_range" in op}
        if len(puts) != len(set(puts)) or deletes & set(puts):
            raise gw.GatewayError("etcd gateway 400: duplicate key given in txn request")

    def _txn(self, body: dict) -> dict:
        holds = all(self._holds(c) for c in body.get("compare", ()))
        ops = body.get("success" if holds else "failure", [])
        self._check_keys(ops)
        writes = any("request_range" not in op for op in ops)
        revision = self.revision + 1 if writes else self.revision
        responses = []
        for op in ops:
            if "request_range" in op:
                responses.append({"response_range": self._range(op["request_range"])})
            elif "request_put" in op:
                put = op["request_put"]
                key = _b(put["key"])
                created = self.data.get(key, {}).get("create_revision", revision)
                self.data[key] = {"value": _b(put["value"]), "mod_revision": revision, "create_revision": created,
                                  "lease": int(put.get("lease", 0))}
                responses.append({"response_put": {}})
            else:
                self.data.pop(_b(op["request_delete_range"]["key"]), None)
                responses.append({"response_delete_range": {}})
        self.revision = revision
        answer = {"header": {"revision": str(revision)}, "responses": responses}
        if holds:
            answer["succeeded"] = True
        return answer

    def expire_lease(self, lease: int) -> None:
        self.leases.discard(lease)
        for key in [k for k, kv in self.data.items() if kv["lease"] == lease]:
            del self.data[key]

    def call(self, path: str, body: dict) -> dict:
        if path == "/v3/kv/range":
            answer = self._range(body)
            if self.after_range is not None:
                hook, self.after_range = self.after_range, None
                hook()
            return answer
        if path == "/v3/kv/txn":
            return self._txn(body)
        if path == "/v3/lease/grant":
            lease = 1000 + len(self.leases)
            self.leases.add(lease)
            return {"ID": str(lease), "TTL": str(body["TTL"])}
        if path == "/v3/lease/keepalive":
            alive = int(body["ID"]) in self.leases
            return {"result": {"ID": body["ID"], **({"TTL": "5"} if alive else {})}}
        raise AssertionError(path)


@pytest.fixture
def clock(monkeypatch):
    now = {"ms": 1_000_000}
    monkeypatch.setattr(etcd_sweeper, "now_ms", lambda: now["ms"])
    return now


def schedule(etcd: FakeEtcd, key: str, at: int, txn: str | None = None) -> None:
    etcd.call("/v3/kv/txn", keys.schedule_txn([(QUEUE, key, at, txn or key, b"payload")]))


def fired(etcd: FakeEtcd) -> list[tuple[str, int]]:
    return [keys.parse_fired_value(v["value"]) for k, v in sorted(etcd.data.items()) if k.startswith(keys.FIRED)]


def elected(etcd: FakeEtcd) -> Sweeper:
    sweeper = Sweeper(etcd)
    assert sweeper.campaign()
    return sweeper


def test_due_timers_fire_once_in_one_txn_and_later_ones_wait(clock):
    etcd = FakeEtcd()
    # One schedule Txn (one revision for all five): k0 overdue, k1 due now, k2-k4 later.
    etcd.call("/v3/kv/txn", keys.schedule_txn(
        [(QUEUE, f"k{i}", clock["ms"] - 10 + i * 10, f"k{i}", b"payload") for i in range(5)]))
    sweeper = elected(etcd)
    assert sweeper.sweep_once() == 2
    assert sweeper.sweep_once() == 0
    assert fired(etcd) == [("k0", clock["ms"]), ("k1", clock["ms"])]
    assert sorted(k for k in etcd.data if k.startswith(keys.TIMERS)) == [
        keys.timer_key(QUEUE, f"k{i}") for i in (2, 3, 4)]
    clock["ms"] += 30
    assert sweeper.sweep_once() == 3
    assert [txn for txn, _ in fired(etcd)] == ["k0", "k1", "k2", "k3", "k4"]
    assert not [k for k in etcd.data if k.startswith((keys.TIMERS, keys.DUE))]


def test_a_timer_rescheduled_later_fires_at_its_new_time_only(clock):
    etcd = FakeEtcd()
    schedule(etcd, "k", clock["ms"] - 5, "first")
    schedule(etcd, "k", clock["ms"] + 100, "second")  # the old due entry stays behind
    sweeper = elected(etcd)
    sweeper.sweep_once()
    sweeper.sweep_once()
    assert fired(etcd) == []
    assert not etcd.data.get(keys.due_key(clock["ms"] - 5, QUEUE, "k"))
    clock["ms"] += 100
    sweeper.sweep_once()
    assert fired(etcd) == [("second", clock["ms"])]


def test_a_timer_rescheduled_within_the_window_fires_once(clock):
    etcd = FakeEtcd()
    schedule(etcd, "k", clock["ms"] - 20, "first")
    schedule(etcd, "k", clock["ms"] - 10, "second")
    sweeper = elected(etcd)
    sweeper.sweep_once()
    assert fired(etcd) == [("second", clock["ms"])]
    assert not [k for k in etcd.data if k.startswith(keys.DUE)]


def test_a_cancelled_timer_never_fires(clock):
    etcd = FakeEtcd()
    schedule(etcd, "k", clock["ms"] - 5)
    etcd.call("/v3/kv/txn", gw.txn([], [gw.delete(keys.timer_key(QUEUE, "k"))]))
    sweeper = elected(etcd)
    sweeper.sweep_once()
    assert fired(etcd) == []
    assert not [k for k in etcd.data if k.startswith(keys.DUE)]


@pytest.mark.parametrize("change", ["reschedule", "cancel"])
def test_a_change_between_the_range_and_the_fire_txn_wins(clock, change):
    etcd = FakeEtcd()
    schedule(etcd, "k", clock["ms"] - 5, "first")
    schedule(etcd, "other", clock["ms"] - 5)
    sweeper = elected(etcd)

    def concurrent_write():
        if change == "reschedule":
            schedule(etcd, "k", clock["ms"] + 60_000, "later")
        else:
            etcd.call("/v3/kv/txn", gw.txn([], [gw.delete(keys.timer_key(QUEUE, "k"))]))

    etcd.after_range = concurrent_write
    sweeper.sweep_once()
    assert fired(etcd) == [("other", clock["ms"])]
    if change == "reschedule":
        assert keys.timer_key(QUEUE, "k") in etcd.data
        assert keys.due_key(clock["ms"] + 60_000, QUEUE, "k") in etcd.data
    else:
        assert keys.timer_key(QUEUE, "k") not in etcd.data


def test_only_the_elected_sweeper_fires(clock):
    etcd = FakeEtcd()
    schedule(etcd, "k", clock["ms"] - 5)
    first = elected(etcd)
    second = Sweeper(etcd)
    assert not second.campaign()
    assert second.step() == 0
    assert fired(etcd) == []
    etcd.expire_lease(first.lease_id)  # the first one's lease ran out: its key went with it
    assert first.sweep_once() == 0
    assert fired(etcd) == [] and first.election_revision is None
    second._campaigned_at = -etcd_sweeper.LEASE_TTL_S  # its next attempt is due
    assert second.step() == 1
    assert fired(etcd) == [("k", clock["ms"])]


def test_a_sweeper_that_finds_its_own_lease_on_the_key_holds_the_election(clock):
    etcd = FakeEtcd()
    sweeper = elected(etcd)
    sweeper.election_revision = None   # as if the answer to its winning Txn was lost
    sweeper._campaigned_at = -etcd_sweeper.LEASE_TTL_S
    assert sweeper.campaign()
    assert sweeper.election_revision == etcd.data[keys.ELECTION]["create_revision"]


def test_two_consumers_popping_the_same_messages_never_both_take_them():
    etcd = FakeEtcd()
    etcd.call("/v3/kv/txn", gw.txn([], [gw.put(keys.READY + keys.queue_message_id(1, "c", i), b"m%d\0p" % i)
                                        for i in range(3)]))
    ready_range = gw.range_request(keys.READY, gw.prefix_end(keys.READY), limit=2)
    seen_by_first = gw.kvs(etcd.call("/v3/kv/range", ready_range))
    seen_by_second = gw.kvs(etcd.call("/v3/kv/range", ready_range))
    assert etcd.call("/v3/kv/txn", keys.pop_txn(seen_by_first, 5_000)).get("succeeded")
    assert not etcd.call("/v3/kv/txn", keys.pop_txn(seen_by_second, 5_000)).get("succeeded")
    leased = sorted(k for k in etcd.data if k.startswith(keys.LEASED))
    assert leased == [keys.LEASED + keys.queue_message_id(1, "c", i) for i in range(2)]
    assert [k for k in etcd.data if k.startswith(keys.READY)] == [keys.READY + keys.queue_message_id(1, "c", 2)]
