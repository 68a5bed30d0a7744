"""Peer 3, the keys and transactions: the timer design a careful user builds on etcd.

Keys (all under `bench/`):

- `t/<queue>/<timerKey>`: the timer, value its deliverAt (where its due-index entry is).
  Scheduling the same key again overwrites it (a reschedule); deleting it is a cancel.
- `d/<deliverAt, 15 digits>/<queue>/<timerKey>`: the due index, value `txn \\0 payload`. deliverAt
  is zero-padded so that the keys sort by time, and "everything due" is one range
  [`d/`, `d/<now + 1>`).
- `f/<firedAt, 15 digits>/<the timer's mod_revision, 20 digits>/<queue>/<timerKey>`: a fired
  message, value `txn \\0 deliverAt \\0 firedAt \\0 payload`. The keys sort in fire order; the
  timer's mod_revision and key name one write of one timer, so a timer scheduled again with the
  same key fires under a new fired key.
- `sweeper/leader`: the election key, put with the sweeper's lease.
- `q/ready/<id>` and `q/leased/<id>`: the queue (below).

A schedule call is one Txn putting each op's timer key and due-index entry, so both carry the same
mod_revision (atomic, as ours and the peers' batches are). It does not read a rescheduled key's
old deliverAt, so the old entry stays behind until it is due; the sweeper then drops it, since its
mod_revision is no longer the timer's. The payload is stored once, in the entry.

The sweeper (`etcd_sweeper.py`) holds the election and, every 50 ms, ranges the due index up to now
(1,000 entries at most, with their values and mod_revisions) and fires them in one Txn: it
compares each timer key's mod_revision with its entry's (the entry is the timer's latest schedule
exactly when they are equal) and the election key's create_revision with its own, then deletes the
entries and the timers and puts the fired messages. A reschedule or cancel that landed since
(either before the range or between the range and the Txn) changes the timer's mod_revision: the
Txn fails and nothing fires. The sweeper then reads those timers' mod_revisions (one Txn of gets)
and sends the Txn again with each entry judged against what it read: an entry whose timer moved or
went is dropped as stale, the others fire, all still compared. So the reschedule or cancel wins,
and a round costs two round trips unless a timer changed. A sweeper that lost its lease fails the
election compare and fires nothing.

The queue: push is one Txn putting `q/ready/<id>` per message (id: the pushing client's clock in
ns, its tag and a counter, so ids sort in push order). Pop ranges the first `batch` ready keys
(linearizable) and moves them to `q/leased/<id>` (value: the lease deadline and the message) in
one Txn that compares each key's mod_revision, so two consumers never take the same message (the
loser reads again). Ack is one Txn deleting the leased keys; an ack sent with the next pop rides
that pop's Txn instead (deleted in its success and its failure branch). A reaper that moves expired leases
back to ready belongs to this design too; the bench never lets a lease expire, as for Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.peers import etcd_gateway as gw

ROOT = b"bench/"
TIMERS = ROOT + b"t/"
DUE = ROOT + b"d/"
FIRED = ROOT + b"f/"
ELECTION = ROOT + b"sweeper/leader"
READY = ROOT + b"q/ready/"
LEASED = ROOT + b"q/leased/"
SEP = b"\0"
TIME_DIGITS = 15
REVISION_DIGITS = 20


def timer_key(queue: str, key: str) -> bytes:
    return TIMERS + queue.encode() + b"/" + key.encode()


def due_key(deliver_at_ms: int, queue: str, key: str) -> bytes:
    return b"%s%0*d/%s/%s" % (DUE, TIME_DIGITS, deliver_at_ms, queue.encode(), key.encode())


def due_bound(now_ms: int) -> bytes:
    """The range_end of every due-index key with deliverAt <= now_ms."""
    return b"%s%0*d" % (DUE, TIME_DIGITS, now_ms + 1)


def parse_due_key(key: bytes) -> tuple[int, bytes]:
    """(deliverAt, the timer's key) of a due-index key."""
    at, queue_and_key = key[len(DUE):].split(b"/", 1)
    return int(at), TIMERS + queue_and_key


def due_value(txn: str, payload: bytes) -> bytes:
    return txn.encode() + SEP + payload


def fired_key(fired_at_ms: int, timer_mod_revision: int, timer: bytes) -> bytes:
    """Unique per fire: one Txn writes many timers at one revision, but a (revision, timer key)
    pair names one write of one timer."""
    return b"%s%0*d/%0*d/%s" % (FIRED, TIME_DIGITS, fired_at_ms, REVISION_DIGITS, timer_mod_revision,
                               timer[len(TIMERS):])


def parse_fired_value(value: bytes) -> tuple[str, int]:
    """(txn, firedAt) of a fired message."""
    txn, _, fired_at, _ = value.split(SEP, 3)
    return txn.decode(), int(fired_at)


def schedule_txn(entries: list[tuple[str, str, int, str, bytes]]) -> dict:
    """One Txn putting the timer key and its due-index entry for each (queue, key, deliverAt, txn, payload)."""
    success = []
    for queue, key, at, txn, payload in entries:
        success.append(gw.put(timer_key(queue, key), b"%d" % at))
        success.append(gw.put(due_key(at, queue, key), due_value(txn, payload)))
    return gw.txn([], success)


@dataclass
class SweepPlan:
    body: dict          # the Txn to send
    fired: int          # timers it fires if it succeeds
    stale: int          # due-index entries it drops whose timer was rescheduled or cancelled


def distinct_timer_keys(due: list[dict]) -> list[bytes]:
    """The timers the due entries point at, each once, in order (a timer rescheduled within the
    window has two entries)."""
    return list(dict.fromkeys(parse_due_key(kv["key"])[1] for kv in due))


def sweep_plan(due: list[dict], fired_at_ms: int, election_revision: int,
               timer_revisions: dict[bytes, int] | None = None) -> SweepPlan:
    """The fire Txn for the due-index entries `due` (kvs of etcd_gateway.kvs). Without
    timer_revisions every entry is taken for its timer's latest schedule, and the Txn holds only
    if that is so; with them (each timer's mod_revision as read, 0 when absent), an entry fires
    only if its mod_revision is its timer's, and the Txn holds if no timer changed since the read."""
    expected: dict[bytes, set[int]] = {}
    for kv in due:
        timer = parse_due_key(kv["key"])[1]
        seen = timer_revisions.get(timer, 0) if timer_revisions is not None else kv["mod_revision"]
        expected.setdefault(timer, set()).add(seen)
    compare = [gw.create_revision_is(ELECTION, election_revision)]
    # Two entries of one timer without a read: two revisions expected, so the Txn fails and the
    # read settles which entry is the timer's.
    compare += [gw.mod_revision_is(timer, revision) for timer, revisions in expected.items() for revision in revisions]
    success, fired, stale = [], 0, 0
    for kv in due:
        success.append(gw.delete(kv["key"]))
        at, timer = parse_due_key(kv["key"])
        if kv["mod_revision"] not in expected[timer]:  # cancelled, or an earlier schedule of a rescheduled timer
            stale += 1
            continue
        txn, payload = kv["value"].split(SEP, 1)
        fired += 1
        success.append(gw.delete(timer))
        success.append(gw.put(fired_key(fired_at_ms, kv["mod_revision"], timer),
                              b"%s\0%d\0%d\0%s" % (txn, at, fired_at_ms, payload)))
    return SweepPlan(gw.txn(compare, success, failure=[gw.get(ELECTION)]), fired, stale)


def queue_message_id(clock_ns: int, client_tag: str, seq: int) -> bytes:
    return b"%020d-%s-%09d" % (clock_ns, client_tag.encode(), seq)


def pop_txn(ready: list[dict], lease_deadline_ms: int, acked: list[bytes] = ()) -> dict:
    """Move each ready message (kvs of a range) to leased, if nobody took it since the range. The
    leased keys `acked` are deleted in either branch: an ack riding the pop is settled even when
    the pop lost its race."""
    compare = [gw.mod_revision_is(kv["key"], kv["mod_revision"]) for kv in ready]
    settle = [gw.delete(key) for key in acked]
    success = list(settle)
    for kv in ready:
        success.append(gw.delete(kv["key"]))
        success.append(gw.put(LEASED + kv["key"][len(READY):], b"%d\0%s" % (lease_deadline_ms, kv["value"])))
    return gw.txn(compare, success, failure=settle or None)
