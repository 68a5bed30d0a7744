"""A tick fires its due runs in bulk where it can (fire.fire_runs, `_append_run`) and timer by timer
otherwise; either way the state must end as the general path (fire.fire over the run's Timer
tuples) leaves it: the same answers and the same snapshot bytes, on every replica, whichever code
a member runs. The cases the bulk path must hand over are all drawn here: dedup hits (from a push,
from an earlier fire, twice in one run), retries, zstd payloads good and bad, a full queue, a
payload over its queue's bound, a window of 0, mixed partitions and producers, NULs in names."""

from __future__ import annotations

import random

import msgpack
import pytest
import zstandard

import queen_raft.state.fire as fire_module
import queen_raft.state.tenant as tenant_module
from queen_raft.state import TenantState, limits
from queen_raft.state.due_runs import runs_of
from queen_raft.state.timer_entries import timer_of

QUEUES = ["q0", "q1", "q\x00x", "q"]
KEYS = [f"k{i}" for i in range(40)] + ["\x00", "a\x00", "a\x00b", "\U0001f600", "\xe9"]
PARTITIONS = ["Default", "Default", "Default", "p1"]
PRODUCERS = ["producer-1", "producer-1", None, "producer-2"]
VALID_ZSTD = zstandard.ZstdCompressor().compress(b'{"fired": true}')
START_MS = 1_700_000_000_000


def general_fire_runs(runs, table, broker, policy, now, memory=None):
    """The reference: every run's timers through the general path."""
    return fire_module.fire([timer for run in runs for timer in run.timers()], table, broker,
                            policy, now, memory)


def commands(seed: int) -> list[dict]:
    """Queues configured, pushes that take some txns first, and schedules that share instants."""
    rng = random.Random(seed)
    out: list[dict] = []
    now = START_MS
    for queue in QUEUES:
        options = {"dedupWindowSeconds": rng.choice([0, 1, 3600, 3600]),
                   "maxSize": rng.choice([0, 0, 0, 5]), "maxPayloadBytes": rng.choice([1_048_576, 1_048_576, 12])}
        out.append({"op": "configure", "now": now, "queue": queue, "options": options})
    txns = [f"t{i}" for i in range(12)]
    out.append({"op": "push", "now": now, "producerSub": "pusher",
                "items": [{"queue": rng.choice(QUEUES), "partition": rng.choice(PARTITIONS),
                           "payload": b"x", "transactionId": rng.choice(txns), "messageId": f"pm{i}",
                           "traceId": None, "encrypted": False} for i in range(rng.randint(0, 6))]})
    for call in range(rng.randint(1, 6)):
        now += rng.choice([0, 1, 2])
        ops = []
        for queue, key in rng.sample([(q, k) for q in QUEUES for k in KEYS], rng.randint(1, 60)):
            zstd = rng.choice(["plain"] * 8 + ["valid", "broken"])
            ops.append({"op": "schedule", "queue": queue, "timerKey": key,
                        "partition": rng.choice(PARTITIONS), "delayMs": rng.choice([0, 1, 1, 2, 3, 50]),
                        "txn": key if rng.random() < 0.6 else rng.choice(txns),
                        "messageId": f"m{call}-{len(ops)}",
                        "payload": VALID_ZSTD if zstd == "valid" else bytes(rng.choice([0, 3, 20])),
                        "payloadZstd": zstd != "plain", "encrypted": rng.random() < 0.2})
        out.append({"op": "timers", "now": now, "producerSub": rng.choice(PRODUCERS), "ops": ops})
    return out


def copy(command: dict) -> dict:
    """The command as a replica gets it: its own decoded copy (lone surrogates kept)."""
    packed = msgpack.packb(command, use_bin_type=True, unicode_errors="surrogatepass")
    return msgpack.unpackb(packed, raw=False, unicode_errors="surrogatepass")


@pytest.mark.parametrize("seed", range(60))
def test_a_tick_in_bulk_leaves_the_state_the_general_path_leaves(seed, monkeypatch):
    rng = random.Random(-seed)
    # A low bound on remembered fires drops runs of records whole and in part.
    monkeypatch.setattr(limits, "MAX_REMEMBERED_FIRES", rng.choice([3, 40, limits.MAX_REMEMBERED_FIRES]))
    bulk, general = TenantState(), TenantState()
    for command in commands(seed):
        answer = bulk.apply(copy(command))
        assert "error" not in answer and answer == general.apply(copy(command))
    now = START_MS + 10
    policy = {"fireBatch": rng.choice([1, 3, 16, 4096]), "fireMaxBytes": rng.choice([10, 4 * 1024 * 1024]),
              "maxAttempts": 2, "backoffMinMs": 1, "backoffMaxMs": 4, "transientBackoffMs": 3}
    lift_at = rng.randint(1, 30)
    for count in range(200):
        if count == lift_at:  # the full and the bounded queues take what failed before: retries fire
            for queue in QUEUES:
                # A window closed now leaves the dedup entries made while it was open, still live.
                lift = {"op": "configure", "now": now, "queue": queue,
                        "options": {"maxSize": 0, "maxPayloadBytes": 1_048_576,
                                    "dedupWindowSeconds": rng.choice([0, 3600])}}
                assert bulk.apply(copy(lift)) == general.apply(copy(lift))
        if rng.random() < 0.3:  # a cancel after fires: the fired memory's lookup and forget
            cancel = {"op": "timers", "now": now, "ops": [
                {"op": "cancel", "queue": rng.choice(QUEUES), "timerKey": rng.choice(KEYS)}]}
            assert bulk.apply(copy(cancel)) == general.apply(copy(cancel))
        tick = {"op": "tick", "now": now, "policy": policy}
        answer = bulk.apply(copy(tick))
        with monkeypatch.context() as patched:
            patched.setattr(tenant_module, "fire_runs", general_fire_runs)
            assert general.apply(copy(tick)) == answer
        assert bulk.snapshot() == general.snapshot()
        if not bulk.timers.count:
            break
        now += rng.choice([0, 1, 2, 5, 700])
    assert bulk.timers.count == general.timers.count == 0 or now > START_MS + 200


def test_two_timers_of_one_run_with_one_txn_append_once(monkeypatch):
    """The second is a duplicate of the first, as in the general path; the dedup index of the
    partition holds neither before the tick, so only the run's own txns can tell."""
    bulk, general = TenantState(), TenantState()
    schedule = {"op": "timers", "now": START_MS, "ops": [
        {"op": "schedule", "queue": "q", "timerKey": key, "partition": "Default", "delayMs": 1,
         "txn": txn, "messageId": f"m-{key}", "payload": b"p", "payloadZstd": False, "encrypted": False}
        for key, txn in (("a", "x"), ("b", "y"), ("c", "x"))]}
    tick = {"op": "tick", "now": START_MS + 5}
    assert bulk.apply(copy(schedule)) == general.apply(copy(schedule))
    answer = bulk.apply(copy(tick))
    monkeypatch.setattr(tenant_module, "fire_runs", general_fire_runs)
    assert general.apply(copy(tick)) == answer
    assert (answer["appended"], answer["duplicate"]) == (2, 1)
    assert bulk.snapshot() == general.snapshot()


def test_a_plain_backlog_goes_in_bulk_and_a_dedup_hit_does_not(monkeypatch):
    """The test above compares outcomes; this one makes sure both paths of fire_runs run."""
    bulk_runs: list[bool] = []
    append_run = fire_module._append_run

    def counted(*arguments):
        bulk_runs.append(append_run(*arguments))
        return bulk_runs[-1]

    monkeypatch.setattr(fire_module, "_append_run", counted)
    state = TenantState()
    state.apply({"op": "push", "now": START_MS, "items": [
        {"queue": "q", "partition": "Default", "payload": b"", "transactionId": "k3", "messageId": "pm",
         "traceId": None, "encrypted": False}]})
    for queue, delay in (("q", 1), ("r", 2)):
        state.apply({"op": "timers", "now": START_MS, "ops": [
            {"op": "schedule", "queue": queue, "timerKey": f"k{i}", "partition": "Default",
             "delayMs": delay, "txn": f"k{i}", "messageId": f"m{i}", "payload": b"p",
             "payloadZstd": False, "encrypted": False} for i in range(10)]})
    answer = state.apply({"op": "tick", "now": START_MS + 5, "policy": {"fireBatch": 100}})
    assert bulk_runs == [False, True]  # q holds k3's message already: timer by timer; r in bulk
    assert (answer["appended"], answer["duplicate"], answer["firedByQueue"]) == (19, 1, {"q": 10, "r": 10})


def test_runs_split_at_each_instant_and_queue_and_decode_as_timer_of():
    state = TenantState()
    for queue in ("q", "q\x00", "q\x00a", "r"):
        state.apply({"op": "timers", "now": START_MS, "ops": [
            {"op": "schedule", "queue": queue, "timerKey": key, "partition": "Default",
             "delayMs": delay + 1, "txn": key, "messageId": "m", "payload": b"p", "payloadZstd": False,
             "encrypted": False} for key, delay in (("a", 0), ("a\x00", 0), ("b", 1), ("\x00", 1))]})
    entries = list(state.timers.due)
    runs = runs_of(entries)
    assert [(run.due_at - START_MS - 1, run.queue, run.keys) for run in runs] == [
        (delay, queue, keys) for delay, keys in ((0, ["a", "a\x00"]), (1, ["\x00", "b"]))
        for queue in ("q", "q\x00", "q\x00a", "r")]
    assert [timer for run in runs for timer in run.timers()] == [timer_of(entry) for entry in entries]
