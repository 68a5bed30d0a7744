"""One tenant's Raft group on this node: propose, linearizable reads, and the leader tick.

Threads: pysyncobj runs its own tick thread per group (sockets, elections, apply). Everything in
this class that is async runs on the asyncio loop thread. The two meet in three places only:
- a proposal's result comes back through pysyncobj's callback (tick thread) and is handed to the
  loop with call_soon_threadsafe;
- apply (tick thread) and reads (loop thread) take the same lock;
- apply and leadership changes wake the tick loop through call_soon_threadsafe(event.set); nothing
  on the tick thread ever waits on the loop (a sync call inside onStateChanged deadlocks it).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import ipaddress
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON, SyncObjConf

from queen_raft import clock
from queen_raft.raft.connection import install_connection_recipe
from queen_raft.raft.leader_append import CoalescingSyncObj
from queen_raft.raft.proposal_batch import DeadlineSlots, ProposalBatcher, settle_future
from queen_raft.raft.journal import fsync_directory_of, install_journal_factory, register_journal, unregister_journal
from queen_raft.raft.replicated_state import ReplicatedTenantState, encode_command
from queen_raft.raft.settings import (
    APPEND_ENTRIES_BATCH_SIZE_BYTES,
    COMMANDS_QUEUE_SIZE,
    CONNECTION_TIMEOUT_S,
    LOG_COMPACTION_MIN_TIME_S,
    MAX_ENTRY_BYTES,
    SOCKET_BUFFER_BYTES,
    RaftSettings,
)
from queen_raft.raft.transport import GroupTransport, split_address

log = logging.getLogger(__name__)
T = TypeVar("T")

JOURNAL_FILE_NAME = "raft.journal"
FULL_DUMP_FILE_NAME = "raft.snapshot"

# Retry-After per reason. An election takes ~0.3 s median and up to ~2 s after a kill -9
# (research section 5), so "no leader" and timeouts ask for a second; a leader change usually has
# a new leader already; a full pipeline drains in well under half a second.
RETRY_AFTER_NO_LEADER_S = 1.0
RETRY_AFTER_TIMEOUT_S = 1.0
RETRY_AFTER_LEADER_CHANGED_S = 0.5
RETRY_AFTER_BUSY_S = 0.5

# A tick that has not committed in this long is abandoned and the loop looks at leadership again
# (a deposed leader keeps proposing until leaderFallbackTimeout; a healthy tick commits in ~1 ms).
# An abandoned tick may still commit later; that is harmless: a fire deletes its timer in the same
# entry, so the next tick fires only what is still due.
TICK_COMMIT_TIMEOUT_S = 1.0

# Ticks proposed and not yet committed while a drain is on (see _tick_until_failure). A 256-fire
# tick's result reaches the loop 2.3-4 ms (p50) and 9-13 ms (p90) after its proposal (traced in
# 200,000- and 500,000-timer drains on this loaded 2-core box); at the 5 ms minimum gap, 4 in
# flight keep proposals at the gap (the bound held back 0.4-1.5 % of the ticks). 8 was no better
# in 500,000-timer drains (44.3k, 41.1k, 46.1k fires/s with 4; 46.4k, 41.4k, 44.8k with 8; load
# 2-3), and would leave up to 7 ticks that find nothing due at the end of a drain instead of 3:
# this is also the bound on those.
TICKS_IN_FLIGHT_MAX = 4

# The finest wait the asyncio loop keeps: selectors.EpollSelector rounds a timeout up to whole ms
# (epoll_wait takes ms), so asyncio.sleep(x) wakes 0-1 ms after x (0.8 ms p50 measured between
# drain ticks). At a 5 ms gap that alone cost 14 % of the drain rate. While a drain is on, the
# tick loop sleeps the whole ms on the loop and blocks (time.sleep, GIL released, never early) for
# the rest, so the loop thread is held less than this per tick; otherwise it just sleeps.
LOOP_TIMER_GRANULARITY_S = 0.001

# After an unexpected exception the tick loop starts again after this pause (bounded log noise).
TICK_LOOP_RESTART_DELAY_S = 0.1
# stop() cancels the tick task again after this long if a cancellation was swallowed.
STOP_RECANCEL_S = 0.1

# A follower's tick loop (or a leader's with tick_ms=0) still wakes this often to notice a new
# leader elsewhere (pysyncobj only reports this node's own role changes) and report it.
LEADERSHIP_WATCH_S = 0.1


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


_ROLE_BY_RAFT_STATE = {0: "follower", 1: "candidate", 2: "leader"}
_REASON_BY_FAIL = {
    FAIL_REASON.QUEUE_FULL: "queue_full",
    FAIL_REASON.MISSING_LEADER: "no_leader",
    FAIL_REASON.DISCARDED: "leader_changed",
    FAIL_REASON.NOT_LEADER: "leader_changed",
    FAIL_REASON.LEADER_CHANGED: "leader_changed",
    FAIL_REASON.UNKNOWN_OUTCOME: "leader_changed",
    FAIL_REASON.REQUEST_DENIED: "busy",
}
_RETRY_AFTER_BY_REASON = {
    "no_leader": RETRY_AFTER_NO_LEADER_S,
    "timeout": RETRY_AFTER_TIMEOUT_S,
    "leader_changed": RETRY_AFTER_LEADER_CHANGED_S,
    "queue_full": RETRY_AFTER_BUSY_S,
    "busy": RETRY_AFTER_BUSY_S,
}


class EntryTooLarge(ValueError):
    """The encoded command exceeds MAX_ENTRY_BYTES: refuse the request (413), never retry it."""


class GroupUnavailable(Exception):
    """The group could not answer now. The outcome of a write may be unknown: it may still commit.

    Every write is idempotent (timers by key, pushes by txn), so the client retries after
    retry_after_s.
    """

    def __init__(self, reason: str, retry_after_s: float | None = None, detail: str = "") -> None:
        self.reason = reason
        self.retry_after_s = _RETRY_AFTER_BY_REASON.get(reason, RETRY_AFTER_TIMEOUT_S) if retry_after_s is None else retry_after_s
        super().__init__(f"{reason}{': ' + detail if detail else ''} (retry after {self.retry_after_s} s)")


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# The error a proposal's future is settled with when its timeout passes first.
_TIMED_OUT = object()


def _time_out(future: asyncio.Future) -> None:
    settle_future(future, None, _TIMED_OUT)


class ResultHandoff:
    """Hands results from pysyncobj's tick thread to the loop, one loop wake-up per batch.

    call_soon_threadsafe writes to the loop's self-pipe; under load one write per result costs a
    syscall each, so results queue here and a single scheduled drain settles all that arrived.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: collections.deque = collections.deque()
        self._drain_scheduled = False

    def put(self, settle: Callable[[Any, Any], None], result: Any, error: int) -> None:  # tick thread
        self._pending.append((settle, result, error))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # loop closed: the node is stopping
                pass

    def _drain(self) -> None:  # loop thread
        # Reset first: a result appended after this line schedules its own drain.
        self._drain_scheduled = False
        pending = self._pending
        while pending:
            settle, result, error = pending.popleft()
            try:
                settle(result, error)
            except Exception:  # one bad settle must not strand the results queued behind it
                log.exception("settling a proposal's answer failed")


class TenantGroup:
    """One tenant's group on this node. Construct on the main thread: pysyncobj's tick thread stops
    when the thread that constructed it exits."""

    def __init__(
        self,
        tenant: str,
        self_addr: str,
        peer_addrs: list[str],
        data_dir: str,
        settings: RaftSettings,
        state_factory: Callable[[], Any] | None = None,
        state_restore: Callable[[bytes], Any] | None = None,
        bind_host: str | None = None,
        dial_map: dict[str, str] | None = None,
    ) -> None:
        if state_factory is None or state_restore is None:
            from queen_raft.state import TenantState

            state_factory = state_factory or TenantState
            state_restore = state_restore or TenantState.restore
        clock.wall_ms()  # a clock offset without the test-hooks flag refuses to start here
        self.tenant = tenant
        self.settings = settings
        self.self_addr = self_addr
        self.peer_addrs = [a for a in peer_addrs if a != self_addr]
        self.dial_map = dict(dial_map or {})
        self_host, self_port = split_address(self_addr)
        self.bind_host = bind_host or self_host
        all_hosts = [self.bind_host, self_host] + [split_address(a)[0] for a in self.peer_addrs + list(self.dial_map.values())]
        if settings.password is None and not all(is_loopback_host(h) for h in all_hosts):
            raise ValueError(
                f"group {tenant!r}: a Raft address is not loopback and no password is set; the peer "
                "protocol is pickle, so an open port would be remote code execution"
            )

        self.on_tick_result: Callable[[dict, list], None] | None = None
        self.on_leadership_change: Callable[[str, str, str | None, int], None] | None = None

        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: ResultHandoff | None = None
        self._batcher: ProposalBatcher | None = None
        self._deadlines: DeadlineSlots | None = None
        self._wake: asyncio.Event | None = None
        self._tick_task: asyncio.Task | None = None
        # Set by stop(): the tick loop ends at its next turn even if a cancellation was lost.
        self._stopping = False
        # The tick loop sleeps until this instant (ms); an apply that makes a timer due earlier
        # wakes it. -inf: nobody to wake; +inf: any due instant wakes.
        self._signal_below_ms: float = -math.inf
        self._in_flight = 0
        self._barrier_waiting: asyncio.Future | None = None
        self._barrier_running = False
        self._barriers_proposed = 0
        self._last_leadership: tuple[str, str | None] | None = None
        self.ticks_proposed = 0

        os.makedirs(data_dir, exist_ok=True)
        self.data_dir = data_dir
        self.journal_file = os.path.join(data_dir, JOURNAL_FILE_NAME)
        self.full_dump_file = os.path.join(data_dir, FULL_DUMP_FILE_NAME)

        install_connection_recipe()
        install_journal_factory()
        register_journal(self.journal_file, settings.fsync, self.full_dump_file)

        self._consumer = ReplicatedTenantState(state_factory, state_restore, self._on_applied)
        conf = SyncObjConf(
            password=settings.password,
            autoTick=True,
            # Heartbeats go only from the tick loop: keep the poll period <= appendEntriesPeriod.
            autoTickPeriod=min(0.05, settings.append_entries_period_s),
            commandsQueueSize=COMMANDS_QUEUE_SIZE,
            raftMinTimeout=settings.election_min_s,
            raftMaxTimeout=settings.election_max_s,
            appendEntriesPeriod=settings.append_entries_period_s,
            connectionTimeout=CONNECTION_TIMEOUT_S,
            connectionRetryTime=settings.connection_retry_s,
            leaderFallbackTimeout=settings.leader_fallback_timeout_s,
            # With batching every commit waits for the next heartbeat (103 ms p50 against 0.25 ms).
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_SIZE_BYTES,
            bindAddress=f"{self.bind_host}:{self_port}",
            sendBufferSize=SOCKET_BUFFER_BYTES,
            recvBufferSize=SOCKET_BUFFER_BYTES,
            logCompactionMinEntries=settings.log_compaction_min_entries,
            logCompactionMinTime=LOG_COMPACTION_MIN_TIME_S,
            journalFile=self.journal_file,
            fullDumpFile=self.full_dump_file,
            useFork=True,
            onStateChanged=self._on_state_changed,
        )
        transport_class = functools.partial(
            GroupTransport, dial_map=self.dial_map, group_commit=settings.fsync == "group",
            handshake_timeout_s=settings.handshake_timeout_s,
        )
        # A follower appends only what its log lacks and never deletes a committed entry
        # (follower_append.py); stock SyncObj deletes and re-adds on every overlapping append.
        # The leader sends AppendEntries once per batch of new commands, not once per command
        # (leader_append.py).
        self._syncobj = CoalescingSyncObj(
            self_addr, self.peer_addrs, conf=conf, consumers=[self._consumer], transportClass=transport_class
        )
        self._transport: GroupTransport = self._syncobj._SyncObj__transport
        if settings.fsync == "group":
            # The journal file may have just been created: make its directory entry durable too.
            fsync_directory_of(self.journal_file)

    # -- leadership ---------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._syncobj._isLeader()

    def leader_addr(self) -> str | None:
        node = self._syncobj._getLeader()
        if node is None:
            return None
        return getattr(node, "address", node.id)

    def status(self) -> dict:
        so = self._syncobj
        return {
            "role": _ROLE_BY_RAFT_STATE.get(so._SyncObj__raftState, "follower"),
            "leader": self.leader_addr(),
            "term": so.raftCurrentTerm,
            "commitIndex": so.raftCommitIndex,
            "appliedIndex": so.raftLastApplied,
            "appendEntries": so.append_counters(),
            "proposals": self._proposal_counters(),
        }

    def _proposal_counters(self) -> dict:
        """This node's batching: entries it proposed through the batcher and the commands they carried."""
        batcher = self._batcher
        if batcher is None:
            return {"entries": 0, "commands": 0, "held": 0}
        return {"entries": batcher.entries_proposed, "commands": batcher.commands_proposed,
                "held": batcher.commands_held}

    def _on_state_changed(self, old: int, new: int) -> None:
        # Tick thread, inside pysyncobj's __setState: only hand over to the loop, never wait.
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._on_role_changed)
        except RuntimeError:  # loop closed: the node is stopping
            pass

    def _on_role_changed(self) -> None:
        self._observe_leadership()
        if self._wake is not None:
            self._wake.set()

    def _observe_leadership(self) -> None:
        status = self.status()
        now = (status["role"], status["leader"])
        if now == self._last_leadership:
            return
        self._last_leadership = now
        hook = self.on_leadership_change
        if hook is not None:
            try:
                hook(self.tenant, status["role"], status["leader"], status["term"])
            except Exception:
                log.exception("on_leadership_change hook failed")

    # -- writes ---------------------------------------------------------------------------------------

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is None:
            self._loop = loop
            self._wake = asyncio.Event()
            self._handoff = ResultHandoff(loop)
            self._deadlines = DeadlineSlots(loop, _time_out)
            # Looks up self._consumer.apply per entry (tests replace it to lose an answer).
            self._batcher = ProposalBatcher(
                loop, lambda entry, on_answer: self._consumer.apply(entry, callback=on_answer), self._handoff.put
            )
        elif self._loop is not loop:
            raise RuntimeError(f"group {self.tenant!r} is bound to another event loop")

    async def propose(self, command: dict) -> dict:
        """Replicate one command; its result as applied on this node. Raises GroupUnavailable.

        Stamps command["now"] with this node's clock when absent (the group clock, SPEC.md 1).
        """
        return await self._propose(command, self.settings.commit_timeout_ms / 1000)

    async def _propose(self, command: dict, timeout_s: float, alone: bool = False) -> dict:
        """alone: propose at once as its own entry, outside the batcher (the leader's ticks)."""
        loop = asyncio.get_running_loop()
        self._bind_loop(loop)
        if "now" not in command:
            command["now"] = clock.wall_ms()
        entry = encode_command(command)
        if len(entry) > MAX_ENTRY_BYTES:
            raise EntryTooLarge(f"entry of {len(entry)} bytes exceeds MAX_ENTRY_BYTES={MAX_ENTRY_BYTES}")
        if self._in_flight >= self.settings.max_in_flight:
            raise GroupUnavailable("busy", detail=f"{self._in_flight} calls in flight")
        leader = self._syncobj._getLeader()
        if leader is None:
            raise GroupUnavailable("no_leader")
        if leader != self._syncobj.selfNode and not self._syncobj.isNodeConnected(leader):
            # The link to the last known leader is down (it died, or a partition): pysyncobj would
            # send the call into the void and answer only at the next election. Say so now.
            raise GroupUnavailable("no_leader", detail=f"not connected to the leader {self.leader_addr()}")
        future = loop.create_future()
        self._in_flight += 1
        # The timeout settles the future itself: asyncio.wait_for adds a waiter future, a done
        # callback and a cancellation per call (5 % of the loop thread's time under single-op load);
        # and it shares a loop timer with the calls around it (DeadlineSlots).
        deadlines = self._deadlines
        deadline_slot = deadlines.arm(future, timeout_s)
        try:
            if alone:
                handoff, settle = self._handoff, functools.partial(settle_future, future)
                self._consumer.apply(entry, callback=lambda result, error: handoff.put(settle, result, error))
            else:
                # Coalesced with the commands proposed around it into one entry (proposal_batch.py).
                self._batcher.add(entry, future, timeout_s)
            result, error = await future
        finally:
            deadlines.disarm(future, deadline_slot)
            self._in_flight -= 1
        if error is _TIMED_OUT:
            raise GroupUnavailable("timeout", detail=f"no commit within {timeout_s * 1000:.0f} ms")
        if isinstance(error, Exception):  # proposing the entry raised: as it would have for this call alone
            raise error
        if error != FAIL_REASON.SUCCESS:
            reason = _REASON_BY_FAIL.get(error, "leader_changed")
            raise GroupUnavailable(reason, detail=f"pysyncobj FAIL_REASON {error}")
        return result

    # -- reads ----------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[Any], T]) -> T:
        """fn(state) after a read barrier: sees every write acknowledged before the call began."""
        self._bind_loop(asyncio.get_running_loop())
        await asyncio.shield(self._join_barrier())
        with self._consumer.lock:
            return fn(self._consumer.state)

    def peek_local(self, fn: Callable[[Any], T]) -> T:
        """fn(state) on this replica's state as it is, without a barrier (metrics, status)."""
        with self._consumer.lock:
            return fn(self._consumer.state)

    def _join_barrier(self) -> asyncio.Future:
        # A read may only join a barrier proposed after it began: one proposed earlier might sit
        # before a write the reader already saw acknowledged. So reads gather on the waiting round,
        # which is proposed once the running one (if any) is done.
        if self._barrier_waiting is None:
            self._barrier_waiting = self._loop.create_future()
            if not self._barrier_running:
                # Let the reads of this loop iteration join before proposing.
                self._barrier_running = True
                self._loop.call_soon(self._start_barrier_round)
        return self._barrier_waiting

    def _start_barrier_round(self) -> None:
        round_future, self._barrier_waiting = self._barrier_waiting, None
        self._barrier_running = True
        self._loop.create_task(self._run_barrier_round(round_future))

    async def _run_barrier_round(self, round_future: asyncio.Future) -> None:
        try:
            self._barriers_proposed += 1
            await self.propose({"op": "barrier"})
        except Exception as exc:
            round_future.set_exception(exc)
            round_future.exception()  # retrieved here: readers that left must not log it
        else:
            round_future.set_result(None)
        finally:
            if self._barrier_waiting is not None:
                self._start_barrier_round()
            else:
                self._barrier_running = False

    @property
    def barriers_proposed(self) -> int:
        return self._barriers_proposed

    # -- the leader tick ------------------------------------------------------------------------------

    def _on_applied(self, next_due_at: int | None) -> None:
        # Tick thread, after every apply: wake the tick loop if a timer became due earlier than
        # the instant it sleeps to. One signal per sleep.
        if next_due_at is not None and next_due_at < self._signal_below_ms:
            self._signal_below_ms = -math.inf
            loop, wake = self._loop, self._wake
            if loop is not None and wake is not None:
                try:
                    loop.call_soon_threadsafe(wake.set)
                except RuntimeError:
                    pass

    def start_tick_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the leader tick (and the leadership watch) on loop. Call it on the loop thread."""
        self._bind_loop(loop)
        if self._tick_task is None:
            self._stopping = False
            self._tick_task = loop.create_task(self._run_tick_loop(), name=f"tick-{self.tenant}")

    async def stop(self) -> None:
        """End the tick loop. Python 3.11's asyncio.wait_for can swallow a cancellation that lands
        as its inner wait completes (CPython gh-86296), and a loop that swallowed it would tick on
        while stop() waited forever (seen in CI). So the loop also checks _stopping each turn, and
        stop() cancels again until the task is done."""
        self._stopping = True
        task, self._tick_task = self._tick_task, None
        if task is None:
            return
        if self._wake is not None:
            self._wake.set()
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL_S)
        if not task.cancelled() and task.exception() is not None:
            log.error("group %s: tick loop ended with %r", self.tenant, task.exception())

    async def _wait_for_wake(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def _run_tick_loop(self) -> None:
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
        """Propose ticks while this node leads: at a due instant, then back to back while moreDue.

        Ticks are pipelined while a drain is on: once the latest tick that committed said moreDue,
        the next tick is proposed as soon as min_gap_ms since the previous proposal has passed,
        without waiting for the previous one to commit, up to TICKS_IN_FLIGHT_MAX in flight.
        Outside a drain (nothing known to be left), at most one tick is in flight, as before.

        Why two ticks in flight cannot fire a timer twice: a tick entry carries no list of timers,
        only the leader's clock and the fire policy. Every replica applies the entries in log order,
        and each tick fires what is due in the state as the entries before it left it; a fire removes
        the timer (or moves it to a retry instant in the future) in that same apply. So the second
        of two ticks sees the first one's fires already applied and takes the next batch, on every
        replica alike; proposing it early changes only where it sits in the log, not what it does.
        The cost of pipelining is at most TICKS_IN_FLIGHT_MAX - 1 ticks that find nothing due at the
        end of a drain (an entry each, firing nothing). The minimum gap still separates any two
        proposals (the loop's decision instants, which are also the ticks' stamps), so the tick rate
        bound of SPEC.md section 2 holds; the rest of each gap is waited out to within a fraction
        of a ms (split_gap_wait), since at the default 5 ms gap every ms late costs ~17 % of the
        drain rate.
        """
        settings = self.settings
        loop = self._loop
        min_gap_s = settings.min_gap_ms / 1000
        last_tick_at = -math.inf  # loop.time() of the previous tick proposal
        more_due = False  # the latest committed tick said more timers were due
        in_flight: set[asyncio.Task] = set()
        outcomes: collections.deque = collections.deque()  # (more_due, backoff_s), in log order
        try:
            while not self._stopping:
                # Committed ticks report in log order (applied in order, handed to the loop in
                # order): the last one is the latest word on whether more is due.
                backoff_s = 0.0
                while outcomes:
                    more_due, tick_backoff_s = outcomes.popleft()
                    backoff_s = max(backoff_s, tick_backoff_s)
                if backoff_s > 0:
                    # Only a role change (or another tick's outcome) cuts the pause short.
                    self._signal_below_ms = -math.inf
                    self._wake.clear()
                    await self._wait_for_wake(backoff_s)
                    continue
                self._observe_leadership()
                self._wake.clear()
                if settings.tick_ms == 0 or not self.is_leader:
                    # Ticks still in flight end on their own (commit, error or timeout).
                    self._signal_below_ms = -math.inf
                    more_due = False
                    await self._wait_for_wake(LEADERSHIP_WATCH_S)
                    continue
                # Any due instant signals until we know how long we will sleep (no lost wake-up).
                self._signal_below_ms = math.inf
                # During a drain the state is not read: the apply lock is held for a whole fire
                # batch's apply, and waiting on it here would stall the loop thread that long.
                due = None if more_due else self.peek_local(lambda state: state.next_due_at())
                now_ms = clock.wall_ms()
                if more_due or (due is not None and due <= now_ms):
                    if in_flight and (not more_due or len(in_flight) >= TICKS_IN_FLIGHT_MAX):
                        # The tick in flight covers what the applied state shows due; its outcome
                        # wakes us (it leaves in_flight before it wakes us; the bound is a backstop).
                        self._signal_below_ms = -math.inf
                        await self._wait_for_wake(TICK_COMMIT_TIMEOUT_S)
                        continue
                    gap_left_s = last_tick_at + min_gap_s - loop.time()
                    if not more_due and gap_left_s > 0:
                        # Not draining: a tick 0-1 ms past the gap costs nothing worth holding
                        # the loop thread for (HTTP calls wait while it is held).
                        await asyncio.sleep(gap_left_s)
                        continue
                    loop_wait_s, blocking_wait_s = split_gap_wait(gap_left_s)
                    if loop_wait_s > 0:
                        await asyncio.sleep(loop_wait_s)
                        continue
                    if blocking_wait_s > 0:
                        # Draining: every ms late costs ~17 % of the drain rate at the 5 ms gap.
                        time.sleep(blocking_wait_s)  # never returns early: the gap is over after it
                    self._signal_below_ms = -math.inf  # the tick's own apply updates the due instant
                    # The gap is kept between the instants stamped into the ticks, not only between
                    # the loop's decisions: the tick task starts a loop iteration later, by a delay
                    # that varies (0.03 ms p50, up to 4 ms when the loop is busy), so a stamp taken
                    # there could follow the previous one by less than the gap.
                    last_tick_at = loop.time()
                    command = {"op": "tick", "policy": settings.tick_policy, "now": clock.wall_ms()}
                    in_flight.add(loop.create_task(self._tick_once(command, outcomes, in_flight)))
                    continue
                sleep_ms = settings.tick_ms if due is None else min(settings.tick_ms, due - now_ms)
                self._signal_below_ms = now_ms + sleep_ms
                await self._wait_for_wake(sleep_ms / 1000)
        finally:
            for task in list(in_flight):
                task.cancel()

    async def _tick_once(self, command: dict, outcomes: collections.deque, in_flight: set) -> None:
        """Propose the tick command; leave in_flight, report (more_due, backoff_s), then wake the loop.

        Leaving in_flight here, before the wake, matters: a done-callback would run only after the
        woken loop has looked at in_flight, and it would wait on a tick that is already over.
        """
        settings = self.settings
        result = None
        try:
            self.ticks_proposed += 1
            # Alone, never in a batch: a tick must not wait behind the batcher's in-flight bound
            # (fire lag, and the drain's pipelining at the minimum gap assume it goes at once), and
            # commands sharing its entry would wait for its fire batch's apply (~5-10 ms at 256).
            # One entry per tick costs at most one entry per min_gap_ms.
            result = await self._propose(
                command,
                min(TICK_COMMIT_TIMEOUT_S, settings.commit_timeout_ms / 1000),
                alone=True,
            )
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
        outcomes.append(outcome)
        self._wake.set()
        if result is None:
            return
        hook = self.on_tick_result
        if hook is not None:
            try:
                hook(result, result.get("lagsMs") or [])
            except Exception:
                log.exception("on_tick_result hook failed")

    # -- lifecycle ------------------------------------------------------------------------------------

    def wait_bound(self) -> None:
        """Block until the Raft port is bound (raises pysyncobj's SyncObjException('BindError'))."""
        self._syncobj.waitBinded()

    def force_log_compaction(self) -> None:
        self._syncobj.forceLogCompaction()

    def destroy(self) -> None:
        """Stop the tick thread, close the peer connections, flush and close the journal."""
        self._syncobj.destroy_synchronous()
        unregister_journal(self.journal_file)

    @property
    def journal_flushes(self) -> int:
        return getattr(self._syncobj._SyncObj__raftLog, "flushes", 0)
