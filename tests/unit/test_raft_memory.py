"""The heap trim after a burst of writes: when it fires, and that it is rate-limited."""

from __future__ import annotations

from queen_raft.raft.transport import BurstEndWatch, HeapTrimmer, _load_malloc_trim

MIB = 1024 * 1024


def test_a_burst_ends_once_it_appended_enough_and_went_quiet():
    watch = BurstEndWatch(min_bytes=4 * MIB, idle_s=1.0)
    assert not watch.burst_ended(0, now=0.0)
    assert not watch.burst_ended(3 * MIB, now=1.0)  # appending
    assert not watch.burst_ended(3 * MIB, now=5.0)  # quiet, but too small a burst
    assert not watch.burst_ended(5 * MIB, now=6.0)  # appending again
    assert not watch.burst_ended(5 * MIB, now=6.9)  # quiet for less than idle_s
    assert watch.burst_ended(5 * MIB, now=7.0)
    assert not watch.burst_ended(5 * MIB, now=9.0)  # once per burst
    assert not watch.burst_ended(8 * MIB, now=10.0)
    assert not watch.burst_ended(8 * MIB, now=12.0)  # only 3 MiB since the last end
    assert not watch.burst_ended(9 * MIB + 1, now=12.5)
    assert watch.burst_ended(9 * MIB + 1, now=13.5)


def test_the_trimmer_calls_malloc_trim_0_at_most_once_per_interval():
    calls = []
    trimmer = HeapTrimmer(min_interval_s=10.0, trim=calls.append)
    assert trimmer.trim(now=100.0)
    assert not trimmer.trim(now=105.0)
    assert trimmer.trim(now=110.0)
    assert calls == [0, 0] and trimmer.trims == 2


def test_glibc_malloc_trim_is_found_and_callable_here():
    # The nodes run on glibc (Linux): without it the trim would silently never happen.
    trim = _load_malloc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)
