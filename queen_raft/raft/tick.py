"""The leader tick: while this node leads its group, propose `tick` entries when timers are due.

Two layers. `decide(view, ...)` is pure: from what the loop knows at one instant (TickView) it
says what to do next: Propose a tick (after blocking out a sub-ms rest of the minimum gap), Sleep
on the loop (the rest of the gap), or Wait for a wake-up with a timeout (the next due instant, a
tick in flight, the leadership watch). `TickLoop` gathers the view, carries the decision out and
keeps the bookkeeping (ticks in flight, their outcomes, the previous proposal's instant).

Runs on the asyncio loop thread. pysyncobj's tick thread reaches it in two ways only, both through
call_soon_threadsafe: an apply that makes a timer due earlier than the loop sleeps to
(`note_applied`), and a role change (`wake`). Nothing on the tick thread ever waits on the loop.

Why ticks may be pipelined during a drain (several proposed before the first commits) without
firing a timer twice: a tick entry carries no list of timers, only the leader's clock and the fire
policy. Every replica applies the entries in log order, and each tick fires what is due in the
state as the entries before it left it; a fire removes the timer (or moves it to a retry instant
in the future) in that same apply. So the second of two ticks sees the first one's fires already
applied and takes the next batch, on every replica alike; proposing it early changes only where it
sits in the log, not what it does. The cost is at most TICKS_IN_FLIGHT_MAX - 1 ticks that find
nothing due at the end of a drain (an entry each, firing nothing). The minimum gap still separates
any two proposals (the loop's decision instants, which are also the ticks' stamps), so the tick
rate bound of docs/spec.md section 2 holds; the rest of each gap is waited out to within a fraction of a ms
(split_gap_wait), since at the default 5 ms gap every ms late costs ~17 % of the drain rate.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pysyncobj import FAIL_REASON

from queen_raft import clock
from queen_raft.raft.errors import GroupUnavailable
from queen_raft.raft.fire_batch import next_fire_batch
from queen_raft.raft.settings import RaftSettings
from queen_raft.raft.tick_riders import Rider, TickRiders, settle_riders
from queen_raft.raft.wake_flag import WakeFlag

log = logging.getLogger(__name__)

# A tick that has not committed in this long is abandoned and the loop looks at leadership again
# (a deposed leader keeps proposing until leaderFallbackTimeout; a healthy tick commits in ~1 ms).
# An abandoned tick may still commit later; that is harmless: a fire deletes its timer in the same
# entry, so the next tick fires only what is still due.
TICK_COMMIT_TIMEOUT_S = 1.0

# Ticks proposed and not yet committed while a drain is on (see the module docstring). A
# 256-fire tick's result reaches the loop a few ms after its proposal (p50; p90 about three times
# that) on a busy machine; at the 5 ms minimum gap, 4 in flight keep proposals at the gap. 8 in
# flight drained no faster, and would leave up to 7 ticks that find nothing due at the end of a
# drain instead of 3: this is also the bound on those.
TICKS_IN_FLIGHT_MAX = 4

# The finest wait the asyncio loop keeps: selectors.EpollSelector rounds a timeout up to whole ms
# (epoll_wait takes ms), so asyncio.sleep(x) wakes 0-1 ms after x. At a 5 ms gap that alone costs
# a large share of the drain rate. While a drain is on, the tick loop sleeps the whole ms on the
# loop and blocks (time.sleep, GIL released, never early) for the rest, so the loop thread is held
# less than this per tick; otherwise it just sleeps.
LOOP_TIMER_GRANULARITY_S = 0.001

# After an unexpected exception the tick loop starts again after this pause (bounded log noise).
TICK_LOOP_RESTART_DELAY_S = 0.1
# stop() cancels the tick task again after this long if a cancellation was swallowed.
STOP_RECANCEL_S = 0.1

# A tick loop with nothing to fire (a follower, a leader whose state holds no timer, or tick_ms=0)
# still wakes this often to notice a new leader elsewhere (pysyncobj only reports this node's own
# role changes) and report it. Nothing else waits on it: this node's own role changes wake the loop
# (wake), and so does an apply that adds a timer (note_applied).
LEADERSHIP_WATCH_S = 1.0


def split_gap_wait(gap_left_s: float) -> tuple[float, float]:
    """(on the loop, blocking) parts of the wait until a tick may go, gap_left_s from now.

    The loop part is whole LOOP_TIMER_GRANULARITY_S steps, which the selector does not round up,
    so the loop wakes by the end of the gap (later only when it is busy); once less than a step is
    left, the rest is blocked out precisely. (0, 0) when the gap is over.
    """
    if gap_left_s <= 0:
        return 0.0, 0.0
    steps = math.floor(gap_left_s / LOOP_TIMER_GRANULARITY_S)
    if steps > 0:
        return steps * LOOP_TIMER_GRANULARITY_S, 0.0
    return 0.0, gap_left_s


@dataclass(frozen=True)
class TickView:
    """What the tick loop knows at one decision instant."""

    leading: bool  # this node leads its group and ticks are on (tick_ms > 0)
    more_due: bool  # the latest committed tick said more timers were due: a drain is on
    next_due_ms: int | None  # the applied state's earliest due instant; None: none, or not read (a drain)
    now_ms: int  # the group clock of this node (wall ms), which ticks are stamped with
    loop_now_s: float  # the loop's monotonic clock, which the minimum gap is measured on
    last_tick_s: float  # loop time of the previous tick proposal; -inf before the first
    in_flight: int  # ticks proposed and not yet settled (committed, failed or timed out)


@dataclass(frozen=True)
class Propose:
    """Propose a tick now, after blocking out `blocking_s` (less than LOOP_TIMER_GRANULARITY_S)."""

    blocking_s: float = 0.0


@dataclass(frozen=True)
class Sleep:
    """Sleep on the loop for `seconds`, deaf to wake-ups: the rest of the minimum gap."""

    seconds: float


@dataclass(frozen=True)
class Wait:
    """Wait for a wake-up, at most `timeout_s`. A tick's outcome or a role change always wakes it;
    an apply wakes it when the state's next due instant is now below `wake_below_ms`."""

    timeout_s: float
    wake_below_ms: float = -math.inf


Decision = Propose | Sleep | Wait


def decide(view: TickView, tick_ms: int, min_gap_s: float) -> Decision:
    """The next step of the tick loop (see the module docstring). Pure: no clock, no I/O."""
    if not view.leading:
        return Wait(LEADERSHIP_WATCH_S)
    due = view.next_due_ms
    if not view.more_due and (due is None or due > view.now_ms):
        # Nothing due: sleep to the next due instant (at most tick_ms, which bounds how late a
        # step of the wall clock can make a fire); an earlier one wakes us. With no timer at all
        # no clock step can make one due: only an apply adding one can, and it wakes us.
        sleep_ms = LEADERSHIP_WATCH_S * 1000 if due is None else min(tick_ms, due - view.now_ms)
        return Wait(sleep_ms / 1000, wake_below_ms=view.now_ms + sleep_ms)
    if view.in_flight and (not view.more_due or view.in_flight >= TICKS_IN_FLIGHT_MAX):
        # The tick in flight covers what the applied state shows due; its outcome wakes us (it
        # leaves in_flight before it wakes us; the timeout is a backstop).
        return Wait(TICK_COMMIT_TIMEOUT_S)
    gap_left_s = view.last_tick_s + min_gap_s - view.loop_now_s
    if not view.more_due:
        # Not draining: a tick 0-1 ms past the gap costs nothing worth holding the loop thread
        # for (HTTP calls wait while it is held).
        return Sleep(gap_left_s) if gap_left_s > 0 else Propose()
    loop_wait_s, blocking_wait_s = split_gap_wait(gap_left_s)
    if loop_wait_s > 0:
        return Sleep(loop_wait_s)
    return Propose(blocking_wait_s)


def latest_outcome(more_due: bool, outcomes: Iterable[tuple[bool, float]]) -> tuple[bool, float]:
    """(more_due, backoff_s) after the settled ticks' outcomes, (more_due, backoff_s) each in log
    order: the last one is the latest word on whether more is due; the longest backoff holds."""
    backoff_s = 0.0
    for more_due, tick_backoff_s in outcomes:
        backoff_s = max(backoff_s, tick_backoff_s)
    return more_due, backoff_s


@dataclass
class TickRun:
    """The tick loop's memory between decisions; a restart after a failure begins a new one."""

    last_tick_s: float = -math.inf
    more_due: bool = False
    in_flight: set = field(default_factory=set)  # the tasks of ticks proposed and not yet settled
    outcomes: collections.deque = field(default_factory=collections.deque)  # (more_due, backoff_s)
    fire_batch: int = 1  # the next tick's policy.fireBatch (fire_batch.py)


class TickLoop:
    """One group's leader tick, as an asyncio task: start(loop), stop(), note_applied (any thread)
    and wake (loop thread).

    The group hands in what the loop needs of it as callables: whether this node leads, the
    applied state's next due instant, the leadership watch, a way to propose one tick alone in its
    entry, and where a committed tick's answer goes; and, optionally, the long polls parked on
    this node with a way to propose an entry of several commands, so that their pops ride the next
    tick's entry (tick_riders.py).
    """

    def __init__(
        self,
        tenant: str,
        settings: RaftSettings,
        is_leader: Callable[[], bool],
        next_due_at: Callable[[], int | None],
        observe_leadership: Callable[[], None],
        propose_tick: Callable[[dict, float], Awaitable[dict]],
        report_result: Callable[[dict], None],
        riders: TickRiders | None = None,
        propose_entry: Callable[[list[dict], float, Callable[[Any, Any], None]], Awaitable[Any]] | None = None,
    ) -> None:
        self.tenant = tenant
        self.settings = settings
        self._is_leader = is_leader
        self._next_due_at = next_due_at
        self._observe_leadership = observe_leadership
        self._propose_tick = propose_tick
        self._report_result = report_result
        self._riders = riders if propose_entry is not None else None
        self._propose_entry = propose_entry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: WakeFlag | None = None
        self.task: asyncio.Task | None = None
        # Set by stop(): the tick loop ends at its next turn even if a cancellation was lost.
        self._stopping = False
        # The tick loop sleeps until this instant (ms); an apply that makes a timer due earlier
        # wakes it. -inf: nobody to wake; +inf: any due instant wakes.
        self._signal_below_ms: float = -math.inf
        self.ticks_proposed = 0

    # -- the two ways in from other threads and from the group -------------------------------------

    def note_applied(self, next_due_at: int | None) -> None:
        """Tick thread, after every apply: wake the loop if a timer became due earlier than the
        instant it sleeps to. One signal per sleep."""
        if next_due_at is not None and next_due_at < self._signal_below_ms:
            self._signal_below_ms = -math.inf
            loop, wake = self._loop, self._wake
            if loop is not None and wake is not None:
                try:
                    loop.call_soon_threadsafe(wake.set)
                except RuntimeError:
                    pass

    def wake(self) -> None:
        """Loop thread: look at leadership and the state again now."""
        if self._wake is not None:
            self._wake.set()

    # -- lifecycle ---------------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is None:
            self._loop = loop
            self._wake = WakeFlag(loop)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bind(loop)
        if self.task is None:
            self._stopping = False
            self.task = loop.create_task(self._run(), name=f"tick-{self.tenant}")

    async def stop(self) -> None:
        """End the tick loop. Python 3.11's asyncio.wait_for can swallow a cancellation that lands
        as its inner wait completes (CPython gh-86296), and a loop that swallowed it would tick on
        while stop() waited forever. So the loop also checks _stopping each turn, and stop()
        cancels again until the task is done."""
        self._stopping = True
        task, self.task = self.task, None
        if task is None:
            return
        self.wake()
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL_S)
        if not task.cancelled() and task.exception() is not None:
            log.error("group %s: tick loop ended with %r", self.tenant, task.exception())

    async def _wait_for_wake(self, timeout_s: float) -> None:
        await self._wake.wait(timeout_s)

    async def _run(self) -> None:
        # The loop must outlive any surprise: a dead tick task would stop every fire of the group.
        while not self._stopping:
            try:
                await self._tick_until_failure()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group %s: tick loop failed; restarting it", self.tenant)
                await asyncio.sleep(TICK_LOOP_RESTART_DELAY_S)

    async def _tick_until_failure(self) -> None:
        """Decide, carry the decision out, again, while not stopping (see the module docstring)."""
        run = TickRun(fire_batch=self.settings.fire_batch_bounds.base)
        try:
            while not self._stopping:
                await self._carry_out(self._next_decision(run), run)
        finally:
            for task in list(run.in_flight):
                task.cancel()

    def _next_decision(self, run: TickRun) -> Decision:
        settled = list(run.outcomes)  # appended by _tick_once, on this thread: nothing lands meanwhile
        run.outcomes.clear()
        run.more_due, backoff_s = latest_outcome(run.more_due, settled)
        if backoff_s > 0:
            # Only a role change (or another tick's outcome) cuts the pause short.
            self._wake.clear()
            return Wait(backoff_s)
        self._observe_leadership()
        self._wake.clear()
        leading = self.settings.tick_ms != 0 and self._is_leader()
        if leading:
            # Any due instant signals until the decision says how long we sleep (no lost wake-up).
            self._signal_below_ms = math.inf
        else:
            run.more_due = False  # ticks still in flight end on their own (commit, error or timeout)
            run.fire_batch = self.settings.fire_batch_bounds.base  # a new leadership starts there
        # During a drain the state is not read: the apply lock is held for a whole fire batch's
        # apply, and waiting on it here would stall the loop thread that long.
        next_due_ms = self._next_due_at() if leading and not run.more_due else None
        view = TickView(leading=leading, more_due=run.more_due, next_due_ms=next_due_ms,
                        now_ms=clock.wall_ms(), loop_now_s=self._loop.time(), last_tick_s=run.last_tick_s,
                        in_flight=len(run.in_flight))
        return decide(view, self.settings.tick_ms, self.settings.min_gap_ms / 1000)

    async def _carry_out(self, decision: Decision, run: TickRun) -> None:
        if isinstance(decision, Wait):
            self._signal_below_ms = decision.wake_below_ms
            await self._wait_for_wake(decision.timeout_s)
        elif isinstance(decision, Sleep):
            await asyncio.sleep(decision.seconds)
        else:
            if decision.blocking_s > 0:
                # Draining: every ms late costs ~17 % of the drain rate at the 5 ms gap.
                time.sleep(decision.blocking_s)  # never returns early: the gap is over after it
            self._signal_below_ms = -math.inf  # the tick's own apply updates the due instant
            # The gap is kept between the instants stamped into the ticks, not only between the
            # loop's decisions: the tick task starts a loop iteration later, by a delay that varies
            # (up to a few ms when the loop is busy), so a stamp taken there could follow the
            # previous one by less than the gap.
            run.last_tick_s = self._loop.time()
            policy = self.settings.tick_policy
            policy["fireBatch"] = run.fire_batch  # the leader's batch travels in the command
            command = {"op": "tick", "policy": policy, "now": clock.wall_ms()}
            riders = self._riders.take() if self._riders is not None else []
            for rider in riders:
                rider.command["now"] = command["now"]  # the pops apply at the tick's instant
            if not run.more_due:
                # Outside a drain at most one tick is in flight and the loop only waits for its
                # outcome: run it here, so the entry is queued for the Raft thread now, not a loop
                # turn after the stamp (up to a few ms when HTTP calls keep the loop busy).
                await self._tick_once(command, run, riders)
                return
            task = self._loop.create_task(self._tick_once(command, run, riders))
            if riders:
                # A task cancelled before it first runs never reaches its own settling.
                task.add_done_callback(lambda _, taken=riders: settle_riders(
                    taken, None, GroupUnavailable("leader_changed", detail="the tick was not proposed")))
            run.in_flight.add(task)

    async def _propose_tick_with(self, command: dict, riders: list[Rider], timeout_s: float) -> Any:
        """The tick's answer; with riders, proposes `[tick, pop, ...]` as one entry and settles each
        rider with its pop's answer, or with the error that ended the tick (then raised again)."""
        if not riders:
            return await self._propose_tick(command, timeout_s)
        def answered(answers: Any, error: Any) -> None:
            # As the entry's answer reaches the loop: the long polls resume without waiting a loop
            # turn for this coroutine.
            if error == FAIL_REASON.SUCCESS and isinstance(answers, list) and len(answers) == len(riders) + 1:
                settle_riders(riders, answers[1:], None)

        try:
            answers = await self._propose_entry([command, *(rider.command for rider in riders)], timeout_s, answered)
        except BaseException as exc:
            settle_riders(riders, None, exc if isinstance(exc, Exception) else
                          GroupUnavailable("leader_changed", detail="the tick was cancelled"))
            raise
        if isinstance(answers, list) and len(answers) == len(riders) + 1:
            settle_riders(riders, answers[1:], None)
            return answers[0]
        # The entry as a whole was refused (it did not decode): every command got that answer.
        settle_riders(riders, [answers] * len(riders), None)
        return answers

    async def _tick_once(self, command: dict, run: TickRun, riders: list[Rider] = ()) -> None:
        """Propose the tick command; leave in_flight, report (more_due, backoff_s) and set the next
        fire batch from the answer, then wake the loop.

        Leaving in_flight here, before the wake, matters: a done-callback would run only after the
        woken loop has looked at in_flight, and it would wait on a tick that is already over.
        """
        settings = self.settings
        outcomes, in_flight = run.outcomes, run.in_flight
        result = None
        try:
            self.ticks_proposed += 1
            # Never through the batcher: a tick must not wait behind its in-flight bound (fire lag,
            # and the drain's pipelining at the minimum gap assume it goes at once), and commands
            # sharing its entry would wait for its fire batch's apply (~5-10 ms at 256). Only the
            # riders' pops share it, after it: they wait for its fires anyway. One entry per tick
            # costs at most one entry per min_gap_ms.
            result = await self._propose_tick_with(command, riders, min(TICK_COMMIT_TIMEOUT_S, settings.commit_timeout_ms / 1000))
        except GroupUnavailable as exc:
            log.info("group %s: tick not committed: %s", self.tenant, exc)
            outcome = (False, settings.tick_ms / 1000)
        except Exception:
            # A surprise (a bug): report it here, where the task ends, and pause as a restart would.
            log.exception("group %s: proposing a tick failed", self.tenant)
            outcome = (False, TICK_LOOP_RESTART_DELAY_S)
        else:
            if not isinstance(result, dict) or "error" in result:
                # A tick the state refused (a bug, not a race): do not retry it at the gap.
                log.warning("group %s: tick answered %r", self.tenant, result)
                outcome = (False, max(settings.tick_ms, settings.min_gap_ms) / 1000)
                result = None
            else:
                outcome = (bool(result.get("moreDue")), 0.0)
        finally:
            in_flight.discard(asyncio.current_task())
        fired = result.get("fired", 0) if result is not None else 0
        run.fire_batch = next_fire_batch(settings.fire_batch_bounds, run.fire_batch,
                                         command["policy"]["fireBatch"], fired, outcome[0])
        outcomes.append(outcome)
        self._wake.set()
        if result is not None:
            self._report_result(result)
