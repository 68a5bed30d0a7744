"""The apply signal that wakes long polls: no lost wake-up, coalesced notifies, timeouts."""

import asyncio
import threading

from queen_raft.api.apply_signal import ApplySignal


async def test_an_apply_between_look_and_wait_is_not_lost():
    signal = ApplySignal()
    signal.bind(asyncio.get_running_loop())
    seen = signal.generation
    signal.notify_threadsafe()  # lands after the look, before the wait
    assert await asyncio.wait_for(signal.wait(5.0, seen), 0.5) is True


async def test_wait_times_out_without_applies():
    signal = ApplySignal()
    signal.bind(asyncio.get_running_loop())
    assert await signal.wait(0.05, signal.generation) is False


async def test_notify_from_another_thread_wakes_every_waiter():
    signal = ApplySignal()
    signal.bind(asyncio.get_running_loop())
    seen = signal.generation
    waiters = [asyncio.ensure_future(signal.wait(5.0, seen)) for _ in range(3)]
    await asyncio.sleep(0.01)
    notifier = threading.Thread(target=lambda: [signal.notify_threadsafe() for _ in range(1000)])
    notifier.start()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1.0) == [True, True, True]
    await asyncio.get_running_loop().run_in_executor(None, notifier.join)
    assert signal.generation == seen + 1000


def test_notify_without_a_loop_only_counts():
    signal = ApplySignal()
    signal.notify_threadsafe()
    assert signal.generation == 1
