"""Peer names are looked up off the calling thread (peer_resolver.py): a dial never waits for DNS."""

from __future__ import annotations

import threading
import time

from queen_raft.raft.peer_resolver import PeerResolver


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def settle(resolver: PeerResolver, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while resolver._looking_up:
        assert time.monotonic() < deadline, "a lookup never ended"
        time.sleep(0.001)


def test_a_numeric_address_is_never_looked_up():
    resolver = PeerResolver(resolve=lambda host: (_ for _ in ()).throw(AssertionError(host)))
    assert resolver.address_of("10.0.0.7") == "10.0.0.7" and resolver.address_of("::1") == "::1"


def test_a_name_is_looked_up_in_the_background_and_its_last_answer_kept_through_failures():
    answers = {"db": ["10.0.0.1"]}
    release = threading.Event()
    calls = []

    def resolve(host):
        calls.append(host)
        release.wait(5)
        return answers[host]

    clock = Clock()
    resolver = PeerResolver(resolve=resolve, clock=clock, cache_s=600, failure_cache_s=30)
    started = time.monotonic()
    assert resolver.address_of("db") is None  # nothing known yet: this dial is skipped, at once
    assert resolver.address_of("db") is None and calls == ["db"]  # one lookup at a time per name
    assert time.monotonic() - started < 1.0
    release.set()
    settle(resolver)
    assert resolver.address_of("db") == "10.0.0.1" and calls == ["db"]  # cached

    release.clear()
    answers["db"] = []  # the DNS fails from now on
    clock.now = 601
    assert resolver.address_of("db") == "10.0.0.1"  # due again: the old answer serves meanwhile
    release.set()
    settle(resolver)
    assert resolver.address_of("db") == "10.0.0.1" and len(calls) == 2  # a failure keeps the last answer
