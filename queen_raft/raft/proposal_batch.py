"""Group commit at the proposer: commands proposed while earlier entries are in flight share one entry.

A command alone in its pysyncobj log entry costs its own pickle, journal record, AppendEntries
framing, commit bookkeeping and apply callback on all three nodes, and on a follower its own
forwarded message to the leader. ProposalBatcher (loop thread) coalesces the commands proposed on
this node into one entry, Nagle-style:

- a command that finds fewer than ENTRIES_IN_FLIGHT_MAX of this node's entries in flight is flushed
  on the next loop iteration (loop.call_soon: no timer), together with whatever else was proposed in
  the same iteration; a lone command waits for nothing;
- while ENTRIES_IN_FLIGHT_MAX entries are in flight, new commands are held; each time one of those
  entries answers (or is given up, see below) everything held goes out at once, in arrival order;
- a batch holds at most COMMANDS_PER_BATCH_MAX commands and at most MAX_ENTRY_BYTES encoded; a command
  that does not fit goes in the next batch, so one near the entry cap goes alone.

The entry format (docs/commands.md, "Batches"): a batch of n >= 2 commands is the msgpack array of
their n single-command entries, each a msgpack bin; a batch of one is the plain single-command entry.
A single-command entry is always a msgpack map, so the first byte tells them apart
(`is_batch_entry`), and journals written before batching apply unchanged.

Each caller gets its own command's result (the apply answers a list, one result per command, in
order); a pysyncobj failure (leader change, no leader, queue full) reaches every caller of the batch.
A caller's commit timeout stays its own (group.py arms it on the caller's future); a command whose
caller already gave up while it was held is dropped here, never proposed. An entry whose answer never
comes (pysyncobj lost it) gives up its in-flight slot at the latest deadline of its callers, so held
commands cannot wait forever behind it.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Callable
from typing import Any

import msgpack
from pysyncobj import FAIL_REASON

from queen_raft.raft.settings import MAX_ENTRY_BYTES

# Entries of this node's own batches proposed and not yet answered before new commands are held.
# 1 would be strict Nagle (a whole commit round of waiting for every command that arrives behind a
# batch); with 2, one batch gathers while the other commits, and at low load nothing is ever held.
# 1, 4 and 16 were no faster, and 2 had the lowest p99 (queen_raft/raft/README.md, "Throughput:
# proposal batching").
ENTRIES_IN_FLIGHT_MAX = 2

# The most commands in one entry. Every caller of a batch waits for the apply of the whole batch
# (pysyncobj answers once per entry), so this bounds how long the first caller waits on its
# neighbours: a batch of 128 single-op schedules applies in about a millisecond (docs/performance.md).
# It sits well above the batches 32 clients form (about ten commands per entry), so it rarely cuts
# one there.
COMMANDS_PER_BATCH_MAX = 128

# The most encoded bytes a batch may carry (the entry cap; see settings.MAX_ENTRY_BYTES for why an
# entry must stay below pysyncobj's append batch size).
BATCH_BYTES_MAX = MAX_ENTRY_BYTES

# msgpack framing, worst case: an array32 header for the batch and a bin32 header per command.
_ARRAY_HEADER_BYTES_MAX = 5
_BIN_HEADER_BYTES_MAX = 5

# First bytes of a msgpack array (fixarray, array16, array32). A single-command entry is a map.
_ARRAY_FIRST_BYTES = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def encode_batch(entries: list[bytes]) -> bytes:
    """The entry of a batch: the msgpack array of its single-command entries (each a bin)."""
    return msgpack.packb(entries, use_bin_type=True)


def is_batch_entry(entry: bytes) -> bool:
    """True for a batch entry, False for a single-command entry (a msgpack map): one byte read."""
    return len(entry) > 0 and entry[0] in _ARRAY_FIRST_BYTES


def decode_batch(entry: bytes) -> list:
    """The single-command entries of a batch entry (a list; its items are bytes when well formed)."""
    decoded = msgpack.unpackb(entry, raw=False)
    if not isinstance(decoded, list):
        raise ValueError(f"a batch entry decodes to {type(decoded).__name__}, not a list")
    return decoded


def batch_bytes(command_sizes: list[int]) -> int:
    """An upper bound on the encoded size of a batch of commands of these encoded sizes."""
    return _ARRAY_HEADER_BYTES_MAX + sum(size + _BIN_HEADER_BYTES_MAX for size in command_sizes)


class _HeldCommand:
    __slots__ = ("entry", "future", "deadline")

    def __init__(self, entry: bytes, future: asyncio.Future, deadline: float) -> None:
        self.entry = entry
        self.future = future
        self.deadline = deadline


def settle_future(future: asyncio.Future, result: Any, error: Any) -> None:
    """A caller's future gets (result, error) once: the first of answer or timeout wins."""
    if not future.done():
        future.set_result((result, error))


# Commit timeouts share one loop timer per window of this length (DeadlineSlots). A caller's
# timeout may fire up to this late, never early: nothing next to the 5 s default commit timeout.
DEADLINE_SLOT_S = 0.01


class DeadlineSlots:
    """Callers' commit timeouts, armed per slot of DEADLINE_SLOT_S instead of per call (loop thread).

    loop.call_later per call pushed a TimerHandle onto the loop's heap (Python-level comparisons,
    a heap of ~20k handles at 4,000 calls/s and a 5 s timeout, nearly all cancelled, re-heapified
    whenever half are) and cancelled it a few ms later: ~4% of the loop thread under single-op load.
    Here the calls whose deadlines fall in one window share a handle, cancelled once the last of
    them is answered; a window's handle fires at its end and times out whoever is still waiting.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_expired: Callable[[asyncio.Future], None],
                 slot_s: float = DEADLINE_SLOT_S) -> None:
        self._loop = loop
        self._on_expired = on_expired
        self._slot_s = slot_s
        # slot number -> (the futures waiting in it, the handle that expires it)
        self._slots: dict[int, tuple[set[asyncio.Future], asyncio.TimerHandle]] = {}

    def __len__(self) -> int:
        return sum(len(waiting) for waiting, _ in self._slots.values())

    @property
    def handles(self) -> int:
        return len(self._slots)

    def arm(self, future: asyncio.Future, timeout_s: float) -> int:
        """Times future out timeout_s from now (up to one slot later); returns the key for disarm."""
        slot = math.ceil((self._loop.time() + timeout_s) / self._slot_s)
        armed = self._slots.get(slot)
        if armed is None:
            armed = self._slots[slot] = (set(), self._loop.call_at(slot * self._slot_s, self._expire, slot))
        armed[0].add(future)
        return slot

    def disarm(self, future: asyncio.Future, slot: int) -> None:
        """The call is over (answered or timed out): forget it; the last one out cancels the handle."""
        armed = self._slots.get(slot)
        if armed is None:
            return
        waiting, handle = armed
        waiting.discard(future)
        if not waiting:
            handle.cancel()
            del self._slots[slot]

    def _expire(self, slot: int) -> None:
        armed = self._slots.pop(slot, None)
        if armed is None:
            return
        for future in list(armed[0]):
            self._on_expired(future)


class _ProposedBatch:
    """One proposed entry and its callers; settled once, from the handoff (loop thread)."""

    __slots__ = ("_batcher", "futures", "wrapped", "release_handle", "released")

    def __init__(self, batcher: "ProposalBatcher", futures: list[asyncio.Future], wrapped: bool) -> None:
        self._batcher = batcher
        self.futures = futures
        self.wrapped = wrapped
        self.release_handle: asyncio.TimerHandle | None = None
        self.released = False

    def settle(self, result: Any, error: Any) -> None:
        futures = self.futures
        if error != FAIL_REASON.SUCCESS:
            for future in futures:
                settle_future(future, None, error)
        elif not self.wrapped:
            settle_future(futures[0], result, error)
        elif isinstance(result, list) and len(result) == len(futures):
            for future, own in zip(futures, result):
                settle_future(future, own, error)
        else:
            # The batch as a whole could not be applied (it did not decode): every replica answered
            # the same refusal, and every caller gets it.
            for future in futures:
                settle_future(future, result, error)
        self.release()

    def release(self) -> None:
        """Give up the in-flight slot (answered, or the answer is overdue), once."""
        if self.released:
            return
        self.released = True
        if self.release_handle is not None:
            self.release_handle.cancel()
        self._batcher._on_batch_released()


class ProposalBatcher:
    """Coalesces commands proposed on this node into entries (loop thread only).

    `submit(entry, on_answer)` proposes one entry; pysyncobj calls on_answer(result, error) on its
    tick thread. `deliver(settle, result, error)` hands that call to the loop thread (the group's
    ResultHandoff), where the batch is settled.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        submit: Callable[[bytes, Callable[[Any, Any], None]], None],
        deliver: Callable[[Callable[[Any, Any], None], Any, Any], None],
        commands_max: int = COMMANDS_PER_BATCH_MAX,
        bytes_max: int = BATCH_BYTES_MAX,
        entries_in_flight_max: int = ENTRIES_IN_FLIGHT_MAX,
    ) -> None:
        if commands_max < 1 or entries_in_flight_max < 1:
            raise ValueError("commands_max and entries_in_flight_max must be >= 1")
        self._loop = loop
        self._submit = submit
        self._deliver = deliver
        self._commands_max = commands_max
        self._bytes_max = bytes_max
        self._entries_in_flight_max = entries_in_flight_max
        self._held: collections.deque[_HeldCommand] = collections.deque()
        self._flush_scheduled = False
        self.entries_in_flight = 0
        # Counters for status and tests: entries proposed, commands they carried.
        self.entries_proposed = 0
        self.commands_proposed = 0

    @property
    def commands_held(self) -> int:
        return len(self._held)

    def add(self, entry: bytes, future: asyncio.Future, timeout_s: float) -> None:
        """Queue one encoded command; its (result, error) lands on future."""
        self._held.append(_HeldCommand(entry, future, self._loop.time() + timeout_s))
        if not self._flush_scheduled and self.entries_in_flight < self._entries_in_flight_max:
            # Next loop iteration, not now: the commands proposed in this iteration join it.
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _on_batch_released(self) -> None:
        self.entries_in_flight -= 1
        if self._held and not self._flush_scheduled:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        held = self._held
        while held and self.entries_in_flight < self._entries_in_flight_max:
            taken = self._take_batch()
            if taken:
                self._propose(taken)

    def _take_batch(self) -> list[_HeldCommand]:
        held = self._held
        taken: list[_HeldCommand] = []
        size = _ARRAY_HEADER_BYTES_MAX
        while held and len(taken) < self._commands_max:
            command = held[0]
            if command.future.done():  # its caller gave up (timeout) while it was held
                held.popleft()
                continue
            cost = len(command.entry) + _BIN_HEADER_BYTES_MAX
            if taken and size + cost > self._bytes_max:
                break
            taken.append(held.popleft())
            size += cost
        return taken

    def _propose(self, taken: list[_HeldCommand]) -> None:
        wrapped = len(taken) > 1
        entry = encode_batch([c.entry for c in taken]) if wrapped else taken[0].entry
        batch = _ProposedBatch(self, [c.future for c in taken], wrapped)
        self.entries_in_flight += 1
        self.entries_proposed += 1
        self.commands_proposed += len(taken)
        batch.release_handle = self._loop.call_at(max(c.deadline for c in taken), batch.release)
        deliver, settle = self._deliver, batch.settle
        try:
            self._submit(entry, lambda result, error: deliver(settle, result, error))
        except Exception as exc:  # every caller of the batch hears it, as each would have alone
            batch.settle(None, exc)
