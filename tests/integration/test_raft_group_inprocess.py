"""TenantGroup in this process (real sockets on 127.0.0.1, real pysyncobj threads): the leader tick's
timing rules, backpressure, failing fast, the handshake guard and the dial map.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import threading
import time
import zlib

import pysyncobj.pickle
import pytest

from queen_raft.config import Settings
from queen_raft.raft import MAX_ENTRY_BYTES, EntryTooLarge, GroupUnavailable, RaftSettings, TenantGroup
from queen_raft.raft.group_api import GroupStatus
from queen_raft.raft.tick import LEADERSHIP_WATCH_S, TICKS_IN_FLIGHT_MAX
from raft_test_state import TimerLogState

pytestmark = pytest.mark.integration

_PORTS = itertools.count(17500)
# A lone node elects itself after one election timeout (0.2-0.6 s).
SELF_ELECTION_WAIT_S = 5.0


@pytest.fixture
def groups(tmp_path):
    made: list[TenantGroup] = []

    def make(settings: RaftSettings, peers: list[str] | None = None, port: int | None = None, **kwargs) -> TenantGroup:
        port = port or next(_PORTS)
        addr = f"127.0.0.1:{port}"
        group = TenantGroup(f"t{port}", addr, [addr] + (peers or []), str(tmp_path / str(port)), settings,
                            TimerLogState, TimerLogState.restore, **kwargs)
        made.append(group)
        return group

    yield make
    for group in made:
        group.destroy()


async def started(group: TenantGroup) -> TenantGroup:
    group.start_tick_loop(asyncio.get_running_loop())
    deadline = time.monotonic() + SELF_ELECTION_WAIT_S
    while not group.is_leader:
        assert time.monotonic() < deadline, "the lone node never became leader"
        await asyncio.sleep(0.01)
    return group


def record_ticks(group: TenantGroup) -> list[tuple[float, dict]]:
    ticks: list[tuple[float, dict]] = []
    loop = asyncio.get_running_loop()
    group.on_tick_result = lambda result, lags: ticks.append((loop.time(), result))
    return ticks


async def wait_until(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_a_sparse_timer_fires_at_its_instant_not_on_a_grid(groups):
    # With a 1 s cap, a loop that polled on a grid would fire up to ~900 ms late.
    group = await started(groups(RaftSettings(tick_ms=1000)))
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "a", "delayMs": 100})
    await wait_until(lambda: ticks, 2.0)
    (_, result), = ticks
    assert result["fired"] == 1
    assert result["lagsMs"][0] < 100
    await group.stop()


async def test_an_earlier_timer_wakes_the_sleeping_tick(groups):
    group = await started(groups(RaftSettings(tick_ms=5000)))
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "late", "delayMs": 3000})
    await asyncio.sleep(0.05)  # the loop now sleeps toward "late", capped at 5 s
    await group.propose({"op": "timer", "key": "early", "delayMs": 100})
    await wait_until(lambda: ticks, 2.0)
    (_, result), = ticks
    assert result["fired"] == 1 and result["lagsMs"][0] < 200  # not ~2.9 s later with "late"
    assert await group.read(lambda s: [f[0] for f in s.fired]) == ["early"]
    await group.stop()


async def test_more_due_goes_again_at_the_minimum_gap_not_the_cap(groups):
    # A fixed batch of 10 (no backlog growth, fire_batch_max = 10): the firing ticks are exact.
    group = await started(groups(RaftSettings(tick_ms=1000, min_gap_ms=20, fire_batch_max=10,
                                              fire_policy=Settings(timer_fire_batch=10).fire_policy())))
    ticks = record_ticks(group)
    await group.propose({"op": "timers", "keys": [f"k{i:02d}" for i in range(35)], "delayMs": 100})
    await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 35, 3.0)
    await wait_until(lambda: len(ticks) == group.ticks_proposed, 3.0)  # pipelined ticks firing nothing
    firing = [r for _, r in ticks if r["fired"]]
    assert [r["fired"] for r in firing] == [10, 10, 10, 5]
    assert [r["moreDue"] for r in firing] == [True, True, True, False]
    # Proposal instants (each tick's stamp, wall ms): >= 20 ms apart (1 ms for rounding to whole
    # ms), and the next tick goes as soon as the gap allows, not after the 1 s cap.
    stamps = [r["now"] for _, r in ticks]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert all(19 <= gap < 500 for gap in gaps), gaps
    # A tick pipelined during the drain may find nothing left: at most TICKS_IN_FLIGHT_MAX - 1.
    assert 4 <= group.ticks_proposed == len(ticks) <= 4 + TICKS_IN_FLIGHT_MAX - 1
    await group.stop()


class SlowTickState(TimerLogState):
    """Applies each tick slowly (longer than the minimum gap), as a large fire batch does."""

    TICK_APPLY_S = 0.03

    def apply(self, command):
        if command["op"] == "tick":
            time.sleep(self.TICK_APPLY_S)
        return super().apply(command)


async def test_a_drain_pipelines_ticks_at_the_gap_and_fires_each_timer_once(tmp_path):
    # Each tick takes 30 ms to apply and the gap is 5 ms: one tick at a time would space them
    # ~30 ms apart; pipelined, proposals follow at the gap while earlier ticks are still applying.
    port = next(_PORTS)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path), RaftSettings(tick_ms=1000, min_gap_ms=5, fire_batch_max=10,
                                                                     fire_policy=Settings(timer_fire_batch=10).fire_policy()),
                        SlowTickState, SlowTickState.restore)
    try:
        await started(group)
        ticks = record_ticks(group)
        proposed_at = []
        real_propose = group._propose

        async def observed_propose(command, timeout_s, **options):
            if command["op"] == "tick":
                proposed_at.append(time.monotonic())
            return await real_propose(command, timeout_s, **options)

        group._propose = observed_propose
        keys = [f"k{i:03d}" for i in range(100)]
        await group.propose({"op": "timers", "keys": keys, "delayMs": 50})
        await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 100, 10.0)
        await wait_until(lambda: len(ticks) == group.ticks_proposed, 5.0)  # the pipelined tail too
        fired = await group.read(lambda s: [f[0] for f in s.fired])
        assert sorted(fired) == keys  # every timer once, none twice
        gaps = [b - a for a, b in zip(proposed_at, proposed_at[1:])]
        assert all(gap >= 0.004 for gap in gaps), gaps  # the minimum gap holds (1 ms rounding)
        # Pipelined: some proposals went out before the previous tick (30 ms to apply) was done.
        assert sum(gap < SlowTickState.TICK_APPLY_S for gap in gaps) >= 3, gaps
        assert group.ticks_proposed <= 10 + TICKS_IN_FLIGHT_MAX - 1 + 1
        await group.stop()
    finally:
        group.destroy()


async def test_timers_coming_due_one_after_another_keep_firing(groups):
    # A stream of due instants ~1 ms apart: a tick often ends (moreDue false) when the next timer
    # is already due. The loop must propose again at once, never wait on the tick just finished.
    group = await started(groups(RaftSettings(tick_ms=5000, min_gap_ms=1)))
    ticks = record_ticks(group)
    for i in range(150):
        await group.propose({"op": "timer", "key": f"k{i:03d}", "delayMs": 100})
    last_due = await group.read(lambda s: max(s.timers.values(), default=0))
    await wait_until(lambda: sum(r["fired"] for _, r in ticks) == 150, 3.0)
    fired = await group.read(lambda s: s.fired)
    assert sorted(f[0] for f in fired) == [f"k{i:03d}" for i in range(150)]
    # Every fire within a few gaps of its instant, not after the 5 s cap (or any 1 s backstop).
    assert max(f[2] - f[1] for f in fired) < 500, max(f[2] - f[1] for f in fired)
    assert last_due > 0
    await group.stop()


async def test_the_status_answers_the_fields_of_group_status(groups):
    group = await started(groups(RaftSettings()))
    status = group.status()
    assert set(status) == set(GroupStatus.__annotations__)
    assert status["role"] == "leader" and status["leader"] == group.self_addr
    await group.stop()


async def test_every_apply_and_tick_raises_on_applied_and_a_failing_hook_changes_nothing(groups):
    group = await started(groups(RaftSettings(tick_ms=1000)))
    applied = []
    group.on_applied = lambda: applied.append(threading.current_thread() is not threading.main_thread())
    await group.propose({"op": "set", "key": "k", "value": 1})
    assert applied and all(applied)  # on pysyncobj's tick thread, after the proposal's apply
    before = len(applied)
    ticks = record_ticks(group)
    await group.propose({"op": "timer", "key": "a", "delayMs": 10})
    await wait_until(lambda: ticks, 2.0)
    await wait_until(lambda: len(applied) >= before + 2, 2.0)  # the schedule's apply, the tick's

    def failing_hook():
        raise RuntimeError("hook failed on purpose")

    group.on_applied = failing_hook
    assert (await group.propose({"op": "set", "key": "k", "value": 2}))["ok"] is True
    assert await group.read(lambda s: s.values) == {"k": 2}
    await group.stop()


async def test_tick_ms_zero_never_fires(groups):
    group = await started(groups(RaftSettings(tick_ms=0)))
    await group.propose({"op": "timer", "key": "a", "delayMs": 0})
    await asyncio.sleep(0.3)
    assert group.ticks_proposed == 0
    assert await group.read(lambda s: s.fired) == []
    await group.stop()


async def test_a_raising_apply_does_not_wedge_the_group(groups):
    group = await started(groups(RaftSettings()))
    assert (await group.propose({"op": "boom"}))["error"] == "internal"
    assert (await group.propose({"op": "set", "key": "k", "value": 1}))["ok"] is True
    assert await group.read(lambda s: s.values) == {"k": 1}


async def test_an_entry_over_the_size_bound_is_refused_before_proposing(groups):
    group = await started(groups(RaftSettings()))
    # A new leader's own first entry may still be applying once it leads: let it land first.
    # pysyncobj calls an entry's callback before it bumps its applied index, so also wait until
    # the applied index has caught up with the commit index before taking it as the baseline.
    await group.read(lambda state: None)
    await wait_until(lambda: group.status()["appliedIndex"] == group.status()["commitIndex"], 2.0)
    applied_before = group.status()["appliedIndex"]
    with pytest.raises(EntryTooLarge):
        await group.propose({"op": "set", "key": "k", "value": b"x" * (MAX_ENTRY_BYTES + 1)})
    await asyncio.sleep(0.2)  # an entry proposed by mistake would have committed by now
    assert group.status()["commitIndex"] == applied_before
    assert group.status()["appliedIndex"] == applied_before


async def test_a_write_not_committed_in_time_answers_timeout(groups, monkeypatch):
    group = await started(groups(RaftSettings(commit_timeout_ms=150)))
    # The entry goes nowhere: pysyncobj never answers this call (as when a commit stalls).
    monkeypatch.setattr(group._consumer, "apply", lambda entry, callback: None)
    started_at = time.monotonic()
    with pytest.raises(GroupUnavailable) as caught:
        await group.propose({"op": "set", "key": "k", "value": 1})
    assert caught.value.reason == "timeout"
    assert 0.14 <= time.monotonic() - started_at < 1.0
    assert group._in_flight == 0
    monkeypatch.undo()
    assert (await group.propose({"op": "set", "key": "after", "value": 1}))["ok"] is True


async def test_calls_beyond_the_in_flight_bound_are_refused_as_busy(groups):
    group = await started(groups(RaftSettings(max_in_flight=2)))
    outcomes = await asyncio.gather(
        *[group.propose({"op": "set", "key": f"k{i}", "value": i}) for i in range(10)], return_exceptions=True
    )
    busy = [o for o in outcomes if isinstance(o, GroupUnavailable)]
    committed = [o for o in outcomes if isinstance(o, dict)]
    assert len(committed) == 2 and len(busy) == 8
    assert all(o.reason == "busy" and o.retry_after_s > 0 for o in busy)
    assert (await group.propose({"op": "set", "key": "after", "value": 1}))["ok"] is True


async def test_without_a_leader_a_write_fails_fast_with_no_leader(groups):
    # Two peers that do not exist: no quorum, no leader, ever.
    group = groups(RaftSettings(), peers=["127.0.0.1:17598", "127.0.0.1:17599"])
    started_at = time.monotonic()
    with pytest.raises(GroupUnavailable) as caught:
        await group.propose({"op": "set", "key": "k", "value": 1})
    assert caught.value.reason == "no_leader" and caught.value.retry_after_s == 1.0
    assert time.monotonic() - started_at < 0.5
    assert group.status()["role"] in ("follower", "candidate") and group.status()["leader"] is None


def test_a_non_loopback_address_without_password_is_refused(tmp_path):
    with pytest.raises(ValueError, match="password"):
        TenantGroup("t", "10.1.2.3:17000", ["10.1.2.4:17000"], str(tmp_path), RaftSettings(),
                    TimerLogState, TimerLogState.restore)


async def test_an_inbound_connection_whose_first_message_is_not_an_address_is_dropped(groups):
    group = await started(groups(RaftSettings()))
    port = int(group.self_addr.rsplit(":", 1)[1])
    frame = zlib.compress(pysyncobj.pickle.dumps({"type": "append_entries"}), 0)
    with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
        raw.sendall(struct.pack("i", len(frame)) + frame)
        raw.settimeout(2)
        assert raw.recv(1) == b"", "the guarded transport closes the connection"
    assert group._transport.handshakes_refused == 1
    assert (await group.propose({"op": "set", "key": "k", "value": 1}))["ok"] is True


class CountingProxy:
    """A TCP relay standing in for the fault harness's per-link proxy."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.bytes_relayed = 0
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self, port: int) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", port)

    async def _relay(self, reader, writer) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    self.bytes_relayed += len(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        self.server.close()


async def test_peers_dial_through_the_dial_map_and_keep_their_identity(groups):
    low, mid, high = next(_PORTS), next(_PORTS), next(_PORTS)
    addrs = [f"127.0.0.1:{p}" for p in (low, mid, high)]
    proxy = CountingProxy(low)
    await proxy.start(next(_PORTS))
    via_proxy = {addrs[0]: f"127.0.0.1:{proxy.server.sockets[0].getsockname()[1]}"}
    # Only the greater address dials, so mid and high reach low through the proxy.
    members = [groups(RaftSettings(), peers=[a for a in addrs if a != addrs[i]], port=p, dial_map=via_proxy)
               for i, p in enumerate((low, mid, high))]
    loop = asyncio.get_running_loop()
    for member in members:
        member.start_tick_loop(loop)
    await wait_until(lambda: any(m.is_leader for m in members) and all(m.leader_addr() for m in members), 5.0)
    result = await members[0].propose({"op": "set", "key": "via", "value": "proxy"})
    assert result["ok"] is True
    for member in members:
        assert await member.read(lambda s: s.values) == {"via": "proxy"}
    assert proxy.connections == 2 and proxy.bytes_relayed > 0
    assert {m.leader_addr() for m in members} <= set(addrs)  # identities are the configured addresses
    for member in members:
        await member.stop()
    await proxy.close()


async def test_a_password_protected_group_commits_and_refuses_a_peer_without_it(groups):
    ports = [next(_PORTS) for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    members = [groups(RaftSettings(password="s3cret"), peers=[a for a in addrs if a != addrs[i]], port=p)
               for i, p in enumerate(ports)]
    loop = asyncio.get_running_loop()
    for member in members:
        member.start_tick_loop(loop)
    await wait_until(lambda: any(m.is_leader for m in members) and all(m.leader_addr() for m in members), 5.0)
    follower = next(m for m in members if not m.is_leader)
    assert (await follower.propose({"op": "set", "key": "k", "value": b"\x00bytes"}))["ok"] is True
    for member in members:
        assert await member.read(lambda s: s.values) == {"k": b"\x00bytes"}

    # A raw peer without the key: its plain-pickle first frame does not decrypt, it is dropped.
    frame = zlib.compress(pysyncobj.pickle.dumps(addrs[0]), 0)
    with socket.create_connection(("127.0.0.1", ports[1]), timeout=2) as raw:
        raw.sendall(struct.pack("i", len(frame)) + frame)
        raw.settimeout(2)
        assert raw.recv(1) == b""
    for member in members:
        await member.stop()


class LinkProxy:
    """One directed link's relay; cut() closes its connections and refuses new ones."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut_off = False
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _relay(self, reader, writer) -> None:
        if self.cut_off:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers += [writer, up_writer]

        async def pipe(src, dst):
            try:
                while (data := await src.read(65536)) and not self.cut_off:
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        self.cut_off = True
        for writer in self.writers:
            writer.close()
        self.writers = []

    def close(self) -> None:
        self.cut()
        self.server.close()


async def test_an_isolated_leader_never_serves_a_stale_read(groups):
    ports = [next(_PORTS) for _ in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    proxies: dict[tuple[str, str], LinkProxy] = {}
    dial_maps: dict[str, dict[str, str]] = {a: {} for a in addrs}
    for dialer in addrs:
        for target in addrs:
            if dialer > target:  # pysyncobj: only the greater address dials
                proxy = LinkProxy(int(target.rsplit(":", 1)[1]))
                proxies[(dialer, target)] = proxy
                dial_maps[dialer][target] = f"127.0.0.1:{await proxy.start()}"
    settings = RaftSettings(commit_timeout_ms=1500)
    members = [groups(settings, peers=[a for a in addrs if a != addrs[i]], port=p, dial_map=dial_maps[addrs[i]])
               for i, p in enumerate(ports)]
    loop = asyncio.get_running_loop()
    for member in members:
        member.start_tick_loop(loop)
    await wait_until(lambda: sum(m.is_leader for m in members) == 1 and all(m.leader_addr() for m in members), 5.0)
    old = next(m for m in members if m.is_leader)
    others = [m for m in members if m is not old]
    await old.propose({"op": "set", "key": "x", "value": "before"})

    for (dialer, target), proxy in proxies.items():
        if old.self_addr in (dialer, target):
            proxy.cut()
    await wait_until(lambda: any(m.is_leader for m in others), 5.0)
    new = next(m for m in others if m.is_leader)
    await new.propose({"op": "set", "key": "x", "value": "after"})

    # The old leader may still believe it leads (leaderFallbackTimeout 2.5 s): its local state says
    # "before", but a barrier read must not answer with it.
    assert old.peek_local(lambda s: s.values["x"]) == "before"
    with pytest.raises(GroupUnavailable):
        await old.read(lambda s: s.values["x"])
    assert await others[0].read(lambda s: s.values["x"]) == "after"
    assert await others[1].read(lambda s: s.values["x"]) == "after"
    for member in members:
        await member.stop()
    for proxy in proxies.values():
        proxy.close()


class TickRefusingState(TimerLogState):
    """A state whose tick answers an error: the loop must back off, not spin at the minimum gap."""

    def apply(self, command):
        if command["op"] == "tick":
            self.clock = max(self.clock, command["now"])
            return {"error": "internal", "message": "tick refused on purpose"}
        return super().apply(command)


async def test_a_tick_the_state_refuses_is_retried_at_the_cap_not_the_gap(tmp_path):
    port = next(_PORTS)
    addr = f"127.0.0.1:{port}"
    group = TenantGroup("t", addr, [addr], str(tmp_path), RaftSettings(tick_ms=100, min_gap_ms=1),
                        TickRefusingState, TickRefusingState.restore)
    try:
        await started(group)
        await group.propose({"op": "timer", "key": "a", "delayMs": 0})
        await asyncio.sleep(0.5)
        # ~5 at a 100 ms cap; a loop retrying at the 1 ms gap would propose hundreds.
        assert 1 <= group.ticks_proposed <= 8
        await group.stop()
    finally:
        group.destroy()


async def test_stop_ends_the_tick_loop_even_when_a_cancellation_is_swallowed(groups):
    # Python 3.11's asyncio.wait_for can swallow a cancellation (CPython gh-86296); a tick loop
    # that lost it kept ticking and stop() waited forever (a 300 s CI hang). Swallow every
    # cancellation the loop's waits receive: stop() must still end it, promptly.
    group = await started(groups(RaftSettings(tick_ms=200)))
    swallowed = []

    async def swallowing_wait(timeout_s: float) -> None:
        try:
            await asyncio.sleep(timeout_s)  # deaf to the wake event, like a wait past its wake-up
        except asyncio.CancelledError:
            swallowed.append(timeout_s)

    group._tick_loop._wait_for_wake = swallowing_wait
    # Past the first wait (no timer pending: up to the leadership watch): the loop now sleeps in
    # swallowing_wait.
    await asyncio.sleep(LEADERSHIP_WATCH_S + 0.3)
    started_at = time.monotonic()
    await asyncio.wait_for(group.stop(), 3.0)
    assert swallowed, "the test did not exercise a swallowed cancellation"
    assert time.monotonic() - started_at < 1.0
    assert group._tick_loop.task is None
