"""The SyncObj side of snapshot durability: a strict snapshot load, and no writer outliving the node.

pysyncobj 0.3.17's __loadDumpFile catches every exception ("failed to load full dump") and goes on
with whatever state it has, which at start is an empty one (appliedIndex 1) that votes, leads
and serves; and when the journal does not start with the snapshot's two entries it clears the
journal and clamps the commit index to what is left. SnapshotGuardedSyncObj replaces it with a
load that does the same work but never drops a committed entry silently:

- at start (clearJournal=False), any failure (a snapshot that does not verify or decode, a state
  that does not restore, a journal that would lose entries past the snapshot, a commit index beyond
  what is held) is recorded as DataDirRefused: the tick thread stops working at once (it never
  polls, votes or leads again), and waitBinded() raises it on the main thread, where the node
  turns it into exit code 65. snapshot_reconcile.py already refused most of these cases when the
  journal was opened; this load is the last line for what only a full load can find.
- on a snapshot installed from the leader (clearJournal=True) the file was verified before it
  replaced the local one (snapshot_writer.py); should the load still fail, it is logged and the
  node keeps the state it had (the consumers are restored first, so a failure changes nothing).
  The journal is cleared there as stock does: the leader sends every entry after the snapshot.

_doDestroy also kills and reaps a snapshot writer still running, so a graceful stop leaves none
behind.

A restarted node must not depose a healthy leader it has not heard from yet. The tick that ends the
start's load re-arms the election deadline (_rearm_election_deadline), and then, until a leader is
heard, each tick holds the node's candidacy while some other member is not connected yet, for at most
connectionTimeout + connectionRetryTime (_hold_candidacy_while_rejoining). Chosen over a pre-vote
phase (Raft thesis 9.6): the hold changes nothing on the wire, so a group of mixed versions needs no
negotiation (an older node ignores a message type it does not know, so a pre-vote left unanswered
would look like a refusal and could stop a group with older members from electing), and a failover
costs no extra round. What it does not cover, a pre-vote would: a member that can reach a follower but
not the leader for longer than the bound still calls an election, as stock pysyncobj does.

A member whose tick thread stalled inside a message longer than an election timeout (a big snapshot
installed from the leader) reads what waits in its sockets before it checks its election deadline
(_read_waiting_messages_before_standing): the leader's heartbeats of the stall re-arm it.

Overrides SyncObj._SyncObj__loadDumpFile, _onTick (wrapped), waitBinded (wrapped) and _doDestroy
(wrapped) of pysyncobj 0.3.17; sets __raftElectionDeadline through __generateRaftTimeout and reads
__raftLeader, __otherNodes, __connectedNodes, __raftState, __selfNode, __transport and the conf's
connection timeout and retry time, and polls _poller; tests/unit/test_raft_recipe_journal.py pins the source.
"""

from __future__ import annotations

import logging
import threading
import time

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE

from queen_raft.raft.follower_append import LogMatchingSyncObj
from queen_raft.raft.snapshot_file import DataDirRefused, SnapshotDamaged
from queen_raft.raft.startup_phases import log_phase, phase_clock

log = logging.getLogger(__name__)

# waitBinded's wait for the first load: checks this often that the tick thread is still alive.
START_LOAD_POLL_S = 0.1


class SnapshotLoadStopped(Exception):
    """Raised out of the tick that found the refusal, so nothing else runs in that tick."""


class SnapshotGuardedSyncObj(LogMatchingSyncObj):
    def __init__(self, *args, **kwargs):
        # Before super().__init__(): the tick thread starts inside it.
        self._start_load_done = threading.Event()
        self.start_refusal: DataDirRefused | None = None
        self.snapshot_installs_failed = 0
        # (phase_clock(), applied index) after the load
        self._replay_started: tuple[tuple[float, float], int] | None = None
        self._rejoin_hold_ends: float | None = None  # monotonic; None: no candidacy held
        super().__init__(*args, **kwargs)

    # -- the load ------------------------------------------------------------------------------------

    def _SyncObj__loadDumpFile(self, clearJournal):
        path = self._SyncObj__conf.fullDumpFile
        try:
            self._load_dump(clearJournal)
        except Exception as exc:
            problem = exc.problem if isinstance(exc, (SnapshotDamaged, DataDirRefused)) else f"{type(exc).__name__}: {exc}"
            if clearJournal:
                self.snapshot_installs_failed += 1
                log.error("loading the snapshot received from the leader (%s) failed, keeping this node's "
                          "state: %s", path, problem)
                return
            self.start_refusal = exc if isinstance(exc, DataDirRefused) else DataDirRefused(
                path, f"the snapshot cannot be loaded: {problem}")
            self._start_load_done.set()
            log.critical("%s", self.start_refusal)
            raise SnapshotLoadStopped(str(self.start_refusal)) from None

    def _load_dump(self, clear_journal: bool) -> None:
        """pysyncobj's __loadDumpFile, raising instead of clearing committed entries or going on empty."""
        started = phase_clock()
        data = self._SyncObj__serializer.deserialize()
        log_phase("snapshot_read", started, "read, verified, unpickled")
        consumers = self._SyncObj__consumers
        if data[0] is not None:
            self_data, consumers_data = (data[0][0], data[0][1:]) if consumers else (data[0], [])
            started = phase_clock()
            for consumer, consumer_data in zip(consumers, consumers_data):
                consumer._deserialize(consumer_data)
            log_phase("snapshot_restore", started, "state decoded and indexed", index=data[1][1])
            self.__dict__.update(self_data)
        last, prev = tuple(data[1]), tuple(data[2])
        raft_log = self._SyncObj__raftLog
        if clear_journal or len(raft_log) < 2 or tuple(raft_log[0]) != prev or tuple(raft_log[1]) != last:
            if not clear_journal and len(raft_log) and raft_log[-1][1] > last[1]:
                raise DataDirRefused(self._SyncObj__conf.fullDumpFile, (
                    f"the snapshot ends at index {last[1]} and does not match the start of the journal, "
                    f"which holds entries up to {raft_log[-1][1]}: loading it would drop them"))
            raft_log.clear()
            raft_log.add(*prev)
            raft_log.add(*last)
        self._SyncObj__raftLastApplied = last[1]
        log_end = self._SyncObj__getCurrentLogIndex()
        if self._SyncObj__raftCommitIndex > log_end:
            if not clear_journal:
                raise DataDirRefused(self._SyncObj__conf.fullDumpFile, (
                    f"the commit index ({self._SyncObj__raftCommitIndex}) is beyond the last entry held "
                    f"({log_end}): committed entries are missing"))
            # Installing the leader's snapshot: the leader sends what follows it. Stored now, not at
            # the next one-second save: a commit index beyond the journal on disk refuses the start.
            self._SyncObj__raftCommitIndex = log_end
            raft_log.setRaftCommitIndex(log_end)
            raft_log.onOneSecondTimer()
        if self._SyncObj__conf.dynamicMembershipChange:
            self._SyncObj__updateClusterConfiguration([node for node in data[3] if node != self._SyncObj__selfNode])
        self._SyncObj__onSetCodeVersion(0)
        if not clear_journal:
            self._replay_started = (phase_clock(), last[1])

    # -- the tick thread and the main thread ---------------------------------------------------------

    def _onTick(self, timeToWait=0.0):
        if self.start_refusal is not None:
            time.sleep(timeToWait)  # refused: never poll, vote, lead or apply again
            return
        if self._start_load_done.is_set():
            if self._rejoin_hold_ends is not None:
                self._hold_candidacy_while_rejoining()
            self._read_waiting_messages_before_standing()
            super()._onTick(timeToWait)
            return
        # Until the start's load is done: that tick loads the snapshot (if any), then applies every
        # committed entry the journal holds past it.
        self._replay_started = (phase_clock(), self._SyncObj__raftLastApplied)
        super()._onTick(timeToWait)
        if not self._SyncObj__needLoadDumpFile:
            self._log_replay()
            self._rearm_election_deadline()
            conf = self._SyncObj__conf
            self._rejoin_hold_ends = monotonic_time() + conf.connectionTimeout + conf.connectionRetryTime
            self._start_load_done.set()

    def _rearm_election_deadline(self) -> None:
        """Count the election timeout from the end of the start's load, as pysyncobj arms it (now plus
        a random draw in [raftMinTimeout, raftMaxTimeout]). pysyncobj arms it at construction, and a
        load longer than the timeout (a big snapshot to restore, a long journal to replay) leaves it
        past before this node has heard anyone: its first connection would start an election and
        depose a healthy leader. Re-armed, the node hears the leader's heartbeat first; with no
        leader it still stands within one election timeout. The load tick's own election check
        cannot fire before this: it runs ahead of the node's first poll, so no peer is connected."""
        self._SyncObj__raftElectionDeadline = monotonic_time() + self._SyncObj__generateRaftTimeout()

    def _hold_candidacy_while_rejoining(self) -> None:
        """Before the election check of each tick after the start: until this node has heard a
        leader, keep its election deadline one election timeout ahead while some other member is
        not connected yet, for at most connectionTimeout + connectionRetryTime after the load.

        Connected to one follower but not yet to the leader, a node past its deadline calls an
        election at term+1 that the follower grants (pysyncobj has no pre-vote): a healthy leader
        deposed because its redial had not got through yet. A healthy leader reaches a listening
        member within that bound: its pending dial is accepted at once, or given up at the
        connection timeout, and redialled within the retry time. Connected to every member, the
        node runs one ordinary election timeout from that moment: a leader among them sends a
        heartbeat within it, so a group restarted whole elects without waiting. A node that reaches
        no leader within the bound (the leader is gone, or unreachable from here) stands one election
        timeout after it, as stock does."""
        now = monotonic_time()
        if self._SyncObj__raftLeader is not None:
            self._rejoin_hold_ends = None
            return
        if now >= self._rejoin_hold_ends:
            self._rejoin_hold_ends = None
            log.info("no leader heard since the start's load: this node may stand for election")
            return
        if not self._SyncObj__otherNodes <= self._SyncObj__connectedNodes:
            self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()

    def _read_waiting_messages_before_standing(self) -> None:
        """Before an election check that would make this node stand, read what waits in its sockets.

        pysyncobj checks the election deadline at the start of a tick, before the tick's poll. A
        tick thread that stalled inside a message for longer than an election timeout (the install
        of a big snapshot from the leader restores the whole state in the handler of its last chunk;
        a long journal write) comes back with its deadline past and the leader's heartbeats of the
        stall unread, and would call an election that deposes a healthy leader. One poll without
        waiting hands those heartbeats to the node first, and they re-arm its deadline. A node whose
        leader is really gone reads nothing and stands in the same tick, as stock does."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER or self._SyncObj__selfNode is None:
            return
        if self._SyncObj__raftElectionDeadline < monotonic_time() and self._SyncObj__transport.ready:
            self._poller.poll(0)

    def _log_replay(self) -> None:
        started, snapshot_index = self._replay_started
        log_phase("journal_replay", started, entries=self._SyncObj__raftLastApplied - snapshot_index,
                  journal_entries=len(self._SyncObj__raftLog))

    def waitBinded(self):
        """Bound, and the snapshot (if any) loaded; DataDirRefused if it could not be."""
        super().waitBinded()
        while not self._start_load_done.wait(START_LOAD_POLL_S):
            if not self.tick_thread_alive():
                break
        if self.start_refusal is not None:
            raise self.start_refusal

    def _doDestroy(self):
        try:
            super()._doDestroy()
        finally:
            stop_writer = getattr(self._SyncObj__serializer, "stop_writer", None)
            if stop_writer is not None:
                stop_writer()

