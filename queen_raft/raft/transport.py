"""The peer transport of a group: pysyncobj's TCPTransport with dialling, guarding and group commit.

- Dial map: a peer keeps its identity (its configured address, which it announces on connect) but
  is dialled through another address. The fault harness puts a proxy on each link and cuts links
  without root.
- Inbound handshake guard: when the first message of an inbound connection (the dialer's address)
  was lost, stock code raised TypeError on every tick until timeout. Drop such a connection.
- Utility commands refused: pysyncobj answers `status`, `add`, `remove`, `set_version` and
  `transfer` sent on a Raft port (its syncobj_admin tool). Nothing of ours uses them; the operator
  surface is the HTTP API, and membership is the config. An inbound connection whose handshake
  message is a utility command is closed unanswered, with or without the password.
- Handshake deadline: an inbound connection that has not named its node within handshake_timeout_s
  of its accept is closed (stock code only times a connection out when it has traffic, so an idle
  one stayed open for good), and at most MAX_PENDING_HANDSHAKES are kept (past it the oldest goes).
- Group commit (fsync="group"): a follower's acknowledgement (next_node_idx) is held while the
  journal has unflushed entries; once per pysyncobj tick, _onTick flushes the journal once and
  releases what was held, in order. _onTick runs after the leader appended this tick's entries and
  before poll(), so the leader's own entries are durable before the next tick's commit scan counts
  the leader itself.

- Full disk: while the journal cannot write (journal.disk_full), this node stands aside: a leader
  steps down at once, before its next commit scan could count entries it could not flush, and the
  node starts no election (its vote could not be stored either). It keeps following, applying what
  the others commit, so its reads go on; its acknowledgements wait for a flush that succeeds.

- Heap trim: after a burst of writes has been quiet for a second, malloc_trim gives the pages the
  burst freed back to the system (HeapTrimmer; the bounds and their measurement in settings.py).

- Peer frames: with a password, every connection of a node that reads AEAD frames carries the
  process's AEAD master key, so it offers them in the handshake and sends them to a peer that
  offered them too (peer_frame.py); `aead_frames=False` leaves a node on Fernet alone, as an older
  version (upgrade tests).

- Listening: the Raft port's listener survives running out of file descriptors, and one that an
  error closed is bound again (listener.py).

It overrides TCPTransport._connectIfNecessarySingle, _onNewIncomingConnection,
_onIncomingMessageReceived, _onDisconnected, send and _onTick of
pysyncobj 0.3.17; tests/unit/test_raft_recipe_wire.py fails if they change.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections import OrderedDict, deque

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from queen_raft.raft.command_forms import PeerForms, stamp
from queen_raft.raft.connection import FastTcpConnection
from queen_raft.raft.journal import GroupCommitJournal
from queen_raft.raft.listener import ResilientTcpServer
from queen_raft.raft.peer_frame import master_key
from queen_raft.raft.peer_resolver import PEER_RESOLVER
from queen_raft.raft.settings import (
    HEAP_TRIM_AFTER_LOG_BYTES,
    HEAP_TRIM_IDLE_S,
    HEAP_TRIM_MIN_INTERVAL_S,
    HANDSHAKE_TIMEOUT_S,
    LOG_COMPACTION_MAX_BYTES,
    MAX_PENDING_HANDSHAKES,
)

log = logging.getLogger(__name__)

# What the Raft ports refused is logged at most this often, as counts: a peer with another
# password, or a stranger, shows in the log without a line per attempt.
REFUSAL_LOG_INTERVAL_S = 60.0

# The checks that watch for slow events (a listener to resume, handshakes past their deadline,
# refusal counts to log, a burst's end to trim the heap after) run at most this often, not on every
# tick: under writes pysyncobj ticks on every message, several times per entry. Each of them acts
# at most this much late, against deadlines of a second or more.
HOUSEKEEPING_INTERVAL_S = 0.05

# The message a follower sends to acknowledge appended entries; held until the journal is durable.
ACKNOWLEDGEMENT_TYPE = "next_node_idx"


def _is_ack(message) -> bool:
    return isinstance(message, dict) and message.get("type") == ACKNOWLEDGEMENT_TYPE


def _supersedes(ack: dict, earlier: dict) -> bool:
    """Whether the leader, given `earlier` and then `ack`, ends where `ack` alone leaves it: both
    report success without a reset, and `ack` reaches at least as far. The leader raises a
    follower's match index only to a higher acknowledged index (syncobj's next_node_idx handler)."""
    return (ack.get("success") is True and earlier.get("success") is True and not ack.get("reset")
            and not earlier.get("reset") and ack.get("next_node_idx", 0) >= earlier.get("next_node_idx", 0))


def split_address(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def _load_malloc_trim():
    """glibc's malloc_trim, or None (another libc: nothing to trim this way). Looked up among the
    symbols already loaded into the process (CDLL(None)): find_library would run ldconfig."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    """malloc_trim(0) for the whole process, at most once every min_interval_s (every group's
    transport asks; one trim serves them all). ctypes releases the GIL during the call."""

    def __init__(self, min_interval_s: float = HEAP_TRIM_MIN_INTERVAL_S, trim=None) -> None:
        self.min_interval_s = min_interval_s
        self._trim = _load_malloc_trim() if trim is None else trim
        self._lock = threading.Lock()
        self._last_at = -math.inf
        self.trims = 0

    def trim(self, now: float) -> bool:
        if self._trim is None:
            return False
        with self._lock:
            if now - self._last_at < self.min_interval_s:
                return False
            self._last_at = now
        self._trim(0)
        self.trims += 1
        return True


PROCESS_HEAP_TRIMMER = HeapTrimmer()


class RefusalLog:
    """Logs, at most every interval_s, how many of the counted refusals happened since the last
    line; nothing when none did. Several groups' tick threads may report to one: the lock lets one
    of them log each interval."""

    def __init__(self, what: str, interval_s: float = REFUSAL_LOG_INTERVAL_S) -> None:
        self.what = what
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last_at = -math.inf
        self._logged: dict[str, int] = {}

    def report(self, counts: dict[str, int], now: float) -> None:
        with self._lock:
            if now - self._last_at < self.interval_s:
                return
            self._last_at = now
            new = {name: count - self._logged.get(name, 0) for name, count in counts.items()}
            self._logged = dict(counts)
        if any(new.values()):
            log.warning("%s, since the last report: %s", self.what,
                        ", ".join(f"{count} {name}" for name, count in new.items() if count))


PROCESS_FRAME_REFUSALS = RefusalLog("Raft connections of this process dropped frames")


class BurstEndWatch:
    """Says when a burst that appended at least `min_bytes` to the journal has been quiet for
    `idle_s`: the moment the pages it freed can go back to the system."""

    def __init__(self, min_bytes: int = HEAP_TRIM_AFTER_LOG_BYTES, idle_s: float = HEAP_TRIM_IDLE_S) -> None:
        self.min_bytes = min_bytes
        self.idle_s = idle_s
        self._seen_bytes = 0
        self._last_append_at = -math.inf
        self._ended_at_bytes = 0

    def burst_ended(self, appended_bytes: int, now: float) -> bool:
        if appended_bytes != self._seen_bytes:
            self._seen_bytes = appended_bytes
            self._last_append_at = now
            return False
        if appended_bytes - self._ended_at_bytes < self.min_bytes or now - self._last_append_at < self.idle_s:
            return False
        self._ended_at_bytes = appended_bytes
        return True


class GroupTransport(TCPTransport):
    heap_trimmer = PROCESS_HEAP_TRIMMER
    # Set by __init__; stay None in a transport a test assembles without it (no trimming there, no
    # handshake deadlines).
    _burst_end: BurstEndWatch | None = None
    _accepted_at: OrderedDict | None = None
    _refusals: RefusalLog | None = None
    peer_forms: PeerForms | None = None
    frame_master: bytes | None = None  # peer_frame.master_key of the password, or None: Fernet only
    handshake_timeout_s = HANDSHAKE_TIMEOUT_S
    handshakes_timed_out = 0
    handshakes_evicted = 0
    utility_commands_refused = 0
    listener_rebinds = 0
    messages_sent: dict[str, int] | None = None
    _housekeeping_due_at = -math.inf

    def __init__(self, syncObj, selfNode, otherNodes, *, dial_map=None, group_commit=False,
                 handshake_timeout_s=HANDSHAKE_TIMEOUT_S, aead_frames=True):
        # Set before super().__init__(): it adds the nodes and creates the server.
        self.dial_map: dict[str, str] = dial_map if dial_map is not None else {}
        password = syncObj.conf.password
        self.frame_master = master_key(password) if password and aead_frames else None
        self.handshake_timeout_s = handshake_timeout_s
        # Inbound connections still in their handshake -> when they were accepted, oldest first.
        self._accepted_at: OrderedDict = OrderedDict()
        self.handshakes_timed_out = 0
        self.handshakes_evicted = 0
        self.utility_commands_refused = 0
        self._refusals = RefusalLog(f"Raft port {selfNode.address if selfNode is not None else '?'} refused connections")
        self.group_commit_journal = None
        # SyncObj.__init__ creates the journal before the transport.
        journal = syncObj._SyncObj__raftLog
        self.journal = journal
        self.compaction_requests = 0
        if group_commit:
            if not isinstance(journal, GroupCommitJournal):
                raise TypeError(f"group commit needs a GroupCommitJournal, got {type(journal).__name__}")
            self.group_commit_journal = journal
        self._held: dict[object, deque] = {}
        self.messages_sent: dict[str, int] = {}  # Raft messages handed to a live connection, by type
        self.handshakes_refused = 0
        self._burst_end = BurstEndWatch()
        self.peer_forms = PeerForms()
        super().__init__(syncObj, selfNode, otherNodes)

    # -- dial map ---------------------------------------------------------------------------------

    def dial_target(self, node) -> tuple[str | None, int]:
        # A name is looked up off the tick thread (peer_resolver.py); None skips this dial.
        mapped = self.dial_map.get(node.address)
        host, port = (node.host, node.port) if mapped is None else split_address(mapped)
        return PEER_RESOLVER.address_of(host), port

    def _connectIfNecessarySingle(self, node):
        # pysyncobj 0.3.17's body, dialling dial_target(node) instead of (node.ip, node.port).
        if node in self._connections and self._connections[node].state != CONNECTION_STATE.DISCONNECTED:
            return True
        if not self._shouldConnect(node):
            return False
        assert node in self._connections
        if node in self._lastConnectAttempt and monotonic_time() - self._lastConnectAttempt[node] < self._syncObj.conf.connectionRetryTime:
            return False
        host, port = self.dial_target(node)
        if host is None:
            return False  # a name not resolved yet (looked up meanwhile): tried again next tick
        self._lastConnectAttempt[node] = monotonic_time()
        conn = self._connections[node]
        conn.frame_master = self.frame_master
        return conn.connect(host, port)

    # -- inbound handshake guard ------------------------------------------------------------------

    def _onNewIncomingConnection(self, conn):
        conn.frame_master = self.frame_master
        super()._onNewIncomingConnection(conn)
        self._accepted_at[conn] = monotonic_time()
        while len(self._accepted_at) > MAX_PENDING_HANDSHAKES:
            oldest, _ = self._accepted_at.popitem(last=False)
            self.handshakes_evicted += 1
            self._close_pending(oldest)

    def _onIncomingMessageReceived(self, conn, message):
        if self._syncObj.encryptor and not conn.sendRandKey:
            acceptable = isinstance(message, bytes)  # the dialer's random key
        elif isinstance(message, str):
            acceptable = True  # the dialer's address, or 'readonly'
        else:
            acceptable = False  # a utility command (a list), or anything else
            if isinstance(message, list):
                self.utility_commands_refused += 1
        if not acceptable:
            self.handshakes_refused += 1
            self._close_pending(conn)
            return
        super()._onIncomingMessageReceived(conn, message)
        if self._accepted_at is not None and conn not in self._unknownConnections:
            self._accepted_at.pop(conn, None)  # named its node (or was refused): no deadline

    def _close_pending(self, conn) -> None:
        self._unknownConnections.discard(conn)
        conn.disconnect()

    def _close_expired_handshakes(self, now: float) -> None:
        accepted_at = self._accepted_at
        while accepted_at:  # None in an assembled transport
            conn, at = next(iter(accepted_at.items()))
            if conn in self._unknownConnections and conn.state != CONNECTION_STATE.DISCONNECTED:
                if now - at <= self.handshake_timeout_s:
                    return  # oldest first: the rest are younger
                self.handshakes_timed_out += 1
                self._close_pending(conn)
            accepted_at.pop(conn, None)

    def _onDisconnected(self, conn):
        if self._accepted_at is not None:
            self._accepted_at.pop(conn, None)
        super()._onDisconnected(conn)

    # -- command forms the peers apply (command_forms.py) -----------------------------------------

    def _onMessageReceived(self, node, message):
        if self.peer_forms is not None:
            self.peer_forms.heard(node, message)
        super()._onMessageReceived(node, message)

    def _onNodeDisconnected(self, node):
        if self.peer_forms is not None:
            self.peer_forms.lost(node)
        super()._onNodeDisconnected(node)

    def peers_apply(self, level: int) -> bool:
        """Whether every other member was last heard at `level` or above (command_forms.py)."""
        return self.peer_forms is not None and self.peer_forms.all_apply(level, self._nodes)

    def _keep_listening(self, now: float) -> None:
        """Resume accepting after an out-of-descriptors backoff; and when an error unbound the
        listener (not destroy), let pysyncobj's _maybeBind bind it again (stock binds only until
        ready)."""
        server = getattr(self, "_server", None)  # absent in a transport a test assembles
        if not isinstance(server, ResilientTcpServer):
            return
        server.resume_if_due(now)
        if self._ready and server.closed_by_error:
            self._ready = False
            self.listener_rebinds += 1
            log.warning("the Raft port listener was closed by an error; binding it again")

    def _report_refusals(self, now: float) -> None:
        if self._refusals is None:
            return
        server = getattr(self, "_server", None)
        self._refusals.report({
            "accepts failed for lack of file descriptors": getattr(server, "accepts_out_of_descriptors", 0),
            "listener rebinds": self.listener_rebinds,
            "handshakes refused": self.handshakes_refused,
            "of them utility commands": self.utility_commands_refused,
            "handshakes timed out": self.handshakes_timed_out,
            "handshakes closed for newer ones": self.handshakes_evicted,
        }, now)
        PROCESS_FRAME_REFUSALS.report({
            "frames that failed authentication or decoding": FastTcpConnection.frames_dropped,
            "frames announcing more than the frame cap": FastTcpConnection.frames_refused,
        }, now)

    def pending_handshakes(self) -> int:
        return len(self._accepted_at or ())

    # -- group commit -----------------------------------------------------------------------------

    def send(self, node, message):
        forms = self.peer_forms
        stamp(message, forms.group_level(self._nodes) if forms is not None else 0)
        journal = self.group_commit_journal
        if journal is not None:
            held = self._held.get(node)
            if held is not None or (message.get("type") == ACKNOWLEDGEMENT_TYPE and journal.dirty):
                # Once something is held for a node, everything after it waits too: order per link.
                if held is None:
                    held = self._held[node] = deque()
                if held and _is_ack(message) and _is_ack(held[-1]) and (
                        _supersedes(message, held[-1]) or getattr(journal, "disk_full", False)):
                    # Only the newest of a run of held acknowledgements is sent (a run grows when
                    # one tick reads several appends; on a full disk it is held, maybe for hours):
                    # it says where this node's log is now.
                    held[-1] = message
                else:
                    held.append(message)
                return node in self._connections and self._connections[node].state == CONNECTION_STATE.CONNECTED
        return self._send_now(node, message)

    def _send_now(self, node, message) -> bool:
        sent = TCPTransport.send(self, node, message)
        counts = self.messages_sent
        if sent and counts is not None and type(message) is dict:
            kind = message.get("type")
            counts[kind] = counts.get(kind, 0) + 1
        return sent

    def _onTick(self):
        now = monotonic_time()
        if now >= self._housekeeping_due_at:
            self._housekeeping_due_at = now + HOUSEKEEPING_INTERVAL_S
            self._keep_listening(now)
            self._close_expired_handshakes(now)
            self._report_refusals(now)
            self._trim_heap_after_a_burst(now)
        self.flush_and_release()
        if getattr(self.journal, "disk_full", False):
            self._stand_aside()
        if not self._nodes:
            self._wake_single_node_commit()
        if getattr(self.journal, "size_bytes", 0) > LOG_COMPACTION_MAX_BYTES:
            # Takes effect at the next tick's compaction check; while a dump is running it is a no-op.
            self._syncObj.forceLogCompaction()
            self.compaction_requests += 1
        super()._onTick()

    def flush_and_release(self) -> None:
        """Group commit: flush the journal once, then send what was held behind the flush, in order
        per peer. Tick thread; at every tick's end, and before a tick applies committed entries."""
        journal = self.group_commit_journal
        if journal is None:
            return
        journal.flush_if_dirty()
        if self._held:
            held_by_node, self._held = self._held, {}
            for node, messages in held_by_node.items():
                for message in messages:
                    self._send_now(node, message)

    def _stand_aside(self) -> None:
        """No leading and no election while the journal cannot write (see the module docstring)."""
        sync_obj = self._syncObj
        if sync_obj._isLeader():
            log.error("stepping down as leader: this node's journal cannot write")
            # What pysyncobj itself does when a leader loses its majority (leaderFallbackTimeout).
            sync_obj._SyncObj__setState(0)  # _RAFT_STATE.FOLLOWER
            sync_obj._SyncObj__raftLeader = None
        sync_obj._SyncObj__raftElectionDeadline = monotonic_time() + sync_obj.conf.raftMaxTimeout

    def _trim_heap_after_a_burst(self, now: float) -> None:
        watch = self._burst_end
        if watch is None:
            return
        if watch.burst_ended(getattr(self.journal, "bytes_appended", 0), now):
            self.heap_trimmer.trim(now)

    def _wake_single_node_commit(self) -> None:
        # A group without peers commits its own entries at the next tick's commit scan, and no
        # peer reply wakes the poll in between: every write would wait a full autoTickPeriod
        # (~50 ms). Wake the poll when entries are waiting for that scan.
        sync_obj = self._syncObj
        if sync_obj.raftCommitIndex < sync_obj._SyncObj__raftLog[-1][1]:
            sync_obj._SyncObj__pipeNotifier.notify()

    def held_count(self) -> int:
        return sum(len(m) for m in self._held.values())
