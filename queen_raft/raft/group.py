"""One tenant's Raft group on this node: propose, linearizable reads, leadership and lifecycle.

The parts live beside it, one concern each: the errors it raises (errors.py), the guard against an
open pickle port (loopback.py), pysyncobj's construction (construction.py), the handoff of results
to the loop (handoff.py), the read barrier (read_barrier.py) and the leader tick (tick.py).

Threads: pysyncobj runs its own tick thread per group (sockets, elections, apply). Everything in
this class that is async runs on the asyncio loop thread. The two meet in three places only:
- a proposal's result comes back through pysyncobj's callback (tick thread) and is handed to the
  loop with call_soon_threadsafe (ResultHandoff);
- apply (tick thread) and reads (loop thread) take the same lock;
- apply and leadership changes wake the tick loop through call_soon_threadsafe(event.set); nothing
  on the tick thread ever waits on the loop (a sync call inside onStateChanged deadlocks it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from pysyncobj import FAIL_REASON

from queen_raft import clock
from queen_raft.raft.compaction_turn import force_next_turn
from queen_raft.raft.construction import GroupFiles, build_syncobj
from queen_raft.raft.errors import EntryTooLarge, GroupUnavailable, unavailable_after_failure
from queen_raft.raft.group_api import GroupStatus
from queen_raft.raft.handoff import ResultHandoff
from queen_raft.raft.peer_links import peer_links
from queen_raft.raft.journal_factory import unregister_journal
from queen_raft.raft.loopback import is_loopback_host, refuse_open_pickle_port
from queen_raft.raft.proposal_batch import DeadlineSlots, ProposalBatcher, encode_batch, settle_future
from queen_raft.raft.read_barrier import ReadBarrier
from queen_raft.raft.replicated_state import ReplicatedTenantState, encode_command
from queen_raft.raft.settings import MAX_ENTRY_BYTES, RaftSettings
from queen_raft.raft.snapshot_writer import snapshot_writer_counters
from queen_raft.raft.tick import TickLoop
from queen_raft.raft.tick_riders import TickRiders
from queen_raft.raft.transport import GroupTransport, split_address

__all__ = ["EntryTooLarge", "GroupUnavailable", "TenantGroup", "is_loopback_host"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_ROLE_BY_RAFT_STATE = {0: "follower", 1: "candidate", 2: "leader"}

# The error a proposal's future is settled with when its timeout passes first.
_TIMED_OUT = object()


def _time_out(future: asyncio.Future) -> None:
    settle_future(future, None, _TIMED_OUT)


def _answer_then_settle(on_answer: Callable[[Any, Any], None], settle: Callable[[Any, Any], None],
                        result: Any, error: Any) -> None:
    try:
        on_answer(result, error)
    finally:
        settle(result, error)


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
        aead_frames: bool = True,  # False: Fernet frames alone, as an older version (tests of a mixed group)
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
        refuse_open_pickle_port(tenant, settings.password, [self.bind_host, self_host] + [
            split_address(a)[0] for a in self.peer_addrs + list(self.dial_map.values())])

        self.on_tick_result: Callable[[dict, list], None] | None = None
        self.on_leadership_change: Callable[[str, str, str | None, int], None] | None = None
        # The group's one applied-event channel: called on pysyncobj's tick thread after every
        # entry applied on this node (any node's proposals, the leader's ticks) and after a
        # restore from a snapshot. It must not block (the node wakes its long polls with it).
        self.on_applied: Callable[[], None] | None = None

        self._loop: asyncio.AbstractEventLoop | None = None
        self._handoff: ResultHandoff | None = None
        self._batcher: ProposalBatcher | None = None
        self._deadlines: DeadlineSlots | None = None
        self._in_flight = 0
        self._last_leadership: tuple[str, str | None] | None = None
        self._barrier = ReadBarrier(self.propose)
        # Long polls parked on this node, whose pops ride the leader's next tick (tick_riders.py).
        self.tick_riders = TickRiders()
        self._tick_loop = self._new_tick_loop()

        files = GroupFiles.under(data_dir)
        self.data_dir = files.data_dir
        self.journal_file = files.journal_file
        self.full_dump_file = files.full_dump_file
        self._consumer = ReplicatedTenantState(state_factory, state_restore, self._on_applied)
        self._consumer.skip_unread_answers = True
        self._syncobj = build_syncobj(
            self_addr, self.peer_addrs, f"{self.bind_host}:{self_port}", self.dial_map, settings, files,
            self._consumer, self._on_state_changed, aead_frames=aead_frames,
        )
        self._transport: GroupTransport = self._syncobj._SyncObj__transport

    # -- leadership ---------------------------------------------------------------------------------

    def peers_apply(self, level: int) -> bool:
        """Whether every other member applies the command forms of `level` (command_forms.py)."""
        return self._transport.peers_apply(level)

    @property
    def is_leader(self) -> bool:
        return self._syncobj._isLeader()

    def leader_addr(self) -> str | None:
        node = self._syncobj._getLeader()
        if node is None:
            return None
        return getattr(node, "address", node.id)

    def status(self) -> GroupStatus:
        so = self._syncobj
        return {
            "role": _ROLE_BY_RAFT_STATE.get(so._SyncObj__raftState, "follower"),
            "leader": self.leader_addr(),
            "term": so.raftCurrentTerm,
            "commitIndex": so.raftCommitIndex,
            "appliedIndex": so.raftLastApplied,
            "appendEntries": so.append_counters(),
            "proposals": self._proposal_counters(),
            "raftMessages": so.message_counters(),
            "diskFull": bool(getattr(so._SyncObj__raftLog, "disk_full", False)),
            "loadError": str(so.start_refusal) if getattr(so, "start_refusal", None) else None,
            "journalFlush": (lambda times: times.snapshot() if times else None)(
                getattr(so._SyncObj__raftLog, "flush_times", None)),
            "peerLinks": peer_links(self._transport, self.peer_addrs),
            "snapshotWriters": snapshot_writer_counters(so._SyncObj__serializer),
            "termStore": so.term_store_faults.status(),
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
        self._tick_loop.wake()

    def _observe_leadership(self) -> None:
        # Every tick-loop turn of every group: read the role and the leader alone, not status().
        so = self._syncobj
        role = _ROLE_BY_RAFT_STATE.get(so._SyncObj__raftState, "follower")
        now = (role, self.leader_addr())
        if now == self._last_leadership:
            return
        self._last_leadership = now
        hook = self.on_leadership_change
        if hook is not None:
            try:
                hook(self.tenant, role, now[1], so.raftCurrentTerm)
            except Exception:
                log.exception("on_leadership_change hook failed")

    # -- writes ---------------------------------------------------------------------------------------

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is None:
            self._loop = loop
            self._tick_loop.bind(loop)
            self._handoff = ResultHandoff(loop)
            self._deadlines = DeadlineSlots(loop, _time_out)
            # Looks up self._consumer.apply per entry (tests replace it to lose an answer).
            self._batcher = ProposalBatcher(
                loop, lambda entry, on_answer: self._consumer.submit(entry, on_answer), self._handoff.put
            )
        elif self._loop is not loop:
            raise RuntimeError(f"group {self.tenant!r} is bound to another event loop")

    async def propose(self, command: dict) -> dict:
        """Replicate one command; its result as applied on this node. Raises GroupUnavailable.

        Stamps command["now"] with this node's clock when absent (the group clock, docs/spec.md section 1).
        """
        if command.get("op") != "barrier" and getattr(self._syncobj._SyncObj__raftLog, "disk_full", False):
            raise GroupUnavailable("disk_full", detail="this node's journal cannot write")  # reads go on
        return await self._propose(command, self.settings.commit_timeout_ms / 1000)

    async def _propose(self, command: dict | list[dict], timeout_s: float, alone: bool = False,
                       on_answer: Callable[[Any, Any], None] | None = None) -> Any:
        """alone: propose at once as its own entry, outside the batcher (the leader's ticks). A list
        of commands (alone only) is one batch entry; its answer is their results, in order.
        on_answer (alone only): called with (result, pysyncobj error) on the loop thread as the
        answer arrives, before the caller's coroutine resumes (a loop turn later)."""
        loop = asyncio.get_running_loop()
        self._bind_loop(loop)
        if isinstance(command, list):
            for one in command:
                one.setdefault("now", clock.wall_ms())
            entry = encode_batch([encode_command(one) for one in command])
        else:
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
        # callback and a cancellation per call (a measurable share of the loop thread under
        # single-op load); and it shares a loop timer with the calls around it (DeadlineSlots).
        deadlines = self._deadlines
        deadline_slot = deadlines.arm(future, timeout_s)
        try:
            if alone:
                handoff, settle = self._handoff, functools.partial(settle_future, future)
                if on_answer is not None:
                    settle = functools.partial(_answer_then_settle, on_answer, settle)
                self._consumer.submit(entry, lambda result, error: handoff.put(settle, result, error))
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
            raise unavailable_after_failure(error)
        return result

    # -- reads ----------------------------------------------------------------------------------------

    async def read(self, fn: Callable[[Any], T]) -> T:
        """fn(state) after a read barrier: sees every write acknowledged before the call began."""
        loop = asyncio.get_running_loop()
        self._bind_loop(loop)
        await asyncio.shield(self._barrier.join(loop))
        with self._consumer.lock:
            return fn(self._consumer.state)

    def peek_local(self, fn: Callable[[Any], T]) -> T:
        """fn(state) on this replica's state as it is, without a barrier (metrics, status)."""
        with self._consumer.lock:
            return fn(self._consumer.state)

    @property
    def barriers_proposed(self) -> int:
        return self._barrier.proposed

    # -- the leader tick ------------------------------------------------------------------------------

    def _new_tick_loop(self) -> TickLoop:
        return TickLoop(
            self.tenant, self.settings,
            is_leader=lambda: self.is_leader,
            next_due_at=lambda: self.peek_local(lambda state: state.next_due_at()),
            observe_leadership=self._observe_leadership,
            # Through the attribute at each call, so a test may observe the tick's proposals.
            propose_tick=lambda command, timeout_s: self._propose(command, timeout_s, alone=True),
            report_result=self._report_tick_result,
            riders=self.tick_riders,
            propose_entry=lambda commands, timeout_s, on_answer: self._propose(commands, timeout_s, alone=True,
                                                                               on_answer=on_answer),
        )

    def _on_applied(self, next_due_at: int | None) -> None:
        # Tick thread, after every apply and after a restore.
        self._tick_loop.note_applied(next_due_at)
        hook = self.on_applied
        if hook is not None:
            try:
                hook()
            except Exception:
                log.exception("on_applied hook failed")

    def _report_tick_result(self, result: dict) -> None:
        hook = self.on_tick_result
        if hook is not None:
            try:
                hook(result, result.get("lagsMs") or [])
            except Exception:
                log.exception("on_tick_result hook failed")

    @property
    def ticks_proposed(self) -> int:
        return self._tick_loop.ticks_proposed

    # -- lifecycle ------------------------------------------------------------------------------------

    def start_tick_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the leader tick (and the leadership watch) on loop. Call it on the loop thread."""
        self._bind_loop(loop)
        self._tick_loop.start(loop)

    async def stop(self) -> None:
        """End the tick loop (see TickLoop.stop)."""
        await self._tick_loop.stop()

    def wait_bound(self) -> None:
        """Block until the Raft port is bound (raises pysyncobj's SyncObjException('BindError'))."""
        self._syncobj.waitBinded()

    def force_log_compaction(self) -> None:
        """Compact at the next tick, this member's turn or not (compaction_turn.py)."""
        force_next_turn(self.full_dump_file)
        self._syncobj.forceLogCompaction()

    def destroy(self) -> None:
        """Stop the tick thread, close the peer connections, flush and close the journal."""
        self._syncobj.destroy_synchronous()
        unregister_journal(self.journal_file)

    @property
    def journal_flushes(self) -> int:
        return getattr(self._syncobj._SyncObj__raftLog, "flushes", 0)
