"""TenantGroup in this process (real sockets on 127.0.0.1, real pysyncobj threads), its links: the
password a non-loopback address needs, the handshake guard, the dial map through a relay, a
password-protected group, and an isolated leader that never serves a stale read.

Groups are built on the main thread (pytest runs async tests on it), as pysyncobj requires.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import zlib

import pysyncobj.pickle
import pytest

from queen_raft.raft import GroupUnavailable, RaftSettings, TenantGroup
from raft_test_state import TimerLogState
from lone_group_fixture import _PORTS, groups, started, wait_until  # noqa: F401 (groups is a fixture)

pytestmark = pytest.mark.integration


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
