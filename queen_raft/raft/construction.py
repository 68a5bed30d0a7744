"""Building one group's pysyncobj node: its SyncObjConf, its journal and its StoredTermSyncObj.

Everything pysyncobj is told about a group is decided here; group.py only asks for the result.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from pysyncobj import SyncObjConf, SyncObjConsumer

from queen_raft.raft.connection import install_connection_recipe
from queen_raft.raft.journal import fsync_path
from queen_raft.raft.compaction_turn import CompactionTurn, register_turn
from queen_raft.raft.journal_factory import install_journal_factory, register_journal
from queen_raft.raft.snapshot_writer import install_snapshot_writer
from queen_raft.raft.quiet_compaction import install_quiet_compaction
from queen_raft.raft.snapshot_repair import install_snapshot_repair
from queen_raft.raft.settings import (
    APPEND_ENTRIES_BATCH_SIZE_BYTES,
    COMMANDS_QUEUE_SIZE,
    CONNECTION_TIMEOUT_S,
    LOG_COMPACTION_MIN_TIME_S,
    SOCKET_BUFFER_BYTES,
    RaftSettings,
)
from queen_raft.raft.transport import GroupTransport
from queen_raft.raft.stored_term import StoredTermSyncObj

JOURNAL_FILE_NAME = "raft.journal"
FULL_DUMP_FILE_NAME = "raft.snapshot"


@dataclass(frozen=True)
class GroupFiles:
    """Where a group keeps its journal and its snapshot (pysyncobj's full dump)."""

    data_dir: str
    journal_file: str
    full_dump_file: str

    @classmethod
    def under(cls, data_dir: str) -> GroupFiles:
        os.makedirs(data_dir, exist_ok=True)
        return cls(data_dir, os.path.join(data_dir, JOURNAL_FILE_NAME), os.path.join(data_dir, FULL_DUMP_FILE_NAME))


def fsync_directory_chain(path: str) -> None:
    """fsync the directory holding `path` and every directory above it: each one holds the entry of
    the next, and the node makes its group's directories (`<data_dir>/<node>/<tenant>`) itself, so
    until their parents are synced a power loss can take the whole journal with them. Done at every
    start, not only when the directories were just made: a kill -9 between the mkdir and the fsync
    leaves them in the page cache, existing but never synced. A directory above that this process
    may not open is not one it made: the walk stops there."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            fsync_path(directory)
        except PermissionError:
            return
        parent = os.path.dirname(directory)
        if parent == directory:
            return
        directory = parent



def syncobj_conf(settings: RaftSettings, bind_address: str, files: GroupFiles,
                 on_state_changed: Callable[[int, int], None]) -> SyncObjConf:
    return SyncObjConf(
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
        bindAddress=bind_address,
        sendBufferSize=SOCKET_BUFFER_BYTES,
        recvBufferSize=SOCKET_BUFFER_BYTES,
        logCompactionMinEntries=settings.log_compaction_min_entries,
        logCompactionMinTime=LOG_COMPACTION_MIN_TIME_S,
        journalFile=files.journal_file,
        fullDumpFile=files.full_dump_file,
        useFork=True,
        onStateChanged=on_state_changed,
    )


def build_syncobj(self_addr: str, peer_addrs: list[str], bind_address: str, dial_map: dict[str, str],
                  settings: RaftSettings, files: GroupFiles, consumer: SyncObjConsumer,
                  on_state_changed: Callable[[int, int], None], aead_frames: bool = True) -> StoredTermSyncObj:
    """The group's SyncObj, its port bound in the background (waitBinded() waits for it).
    `aead_frames=False`: its connections speak Fernet alone, as an older version (connection.py).

    Call on the main thread: pysyncobj's tick thread stops when the constructing thread exits.
    """
    install_connection_recipe()
    install_journal_factory()
    install_snapshot_writer()  # the node process alone replaces raft.snapshot (snapshot_writer.py)
    register_journal(files.journal_file, settings.fsync, files.full_dump_file)
    turn = CompactionTurn.of(self_addr, peer_addrs, settings.log_compaction_min_entries)
    register_turn(files.full_dump_file, turn)
    conf = syncobj_conf(settings, bind_address, files, on_state_changed)
    conf.logCompactionMinEntries = turn.compaction_min_entries(settings.log_compaction_min_entries)
    transport_class = functools.partial(
        GroupTransport, dial_map=dial_map, group_commit=settings.fsync == "group",
        handshake_timeout_s=settings.handshake_timeout_s, aead_frames=aead_frames,
    )
    # A follower appends only what its log lacks and never deletes a committed entry
    # (follower_append.py); stock SyncObj deletes and re-adds on every overlapping append.
    # The leader sends AppendEntries once per batch of new commands, not once per command
    # (leader_append.py). A follower that hears its leader polls up to two heartbeat periods
    # (follower_poll.py). A term or vote is taken only once stored (stored_term.py).
    syncobj = StoredTermSyncObj(
        self_addr, peer_addrs, conf=conf, consumers=[consumer], transportClass=transport_class
    )
    turn.log_bytes = lambda: getattr(syncobj._SyncObj__raftLog, "size_bytes", None)
    turn.snapshot_path = files.full_dump_file
    turn.log_to_snapshot_ratio = settings.log_compaction_log_to_snapshot_ratio
    install_quiet_compaction(syncobj, turn)
    install_snapshot_repair(syncobj, turn)
    serializer = syncobj._SyncObj__serializer
    pause_writers = getattr(serializer, "pause_after_refused_compaction", None)
    if pause_writers is not None:  # a journal whose compaction is refused delays the next writer
        syncobj._SyncObj__raftLog.on_compaction_refused = pause_writers
    if settings.fsync == "group":
        # The journal file and its directories may have just been created: make their entries durable.
        fsync_directory_chain(files.journal_file)
    return syncobj
