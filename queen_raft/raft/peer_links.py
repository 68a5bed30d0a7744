"""How this node's link to each peer of a group is framed: what an operator watches during a rolling
upgrade, until every link of every group carries the AEAD frame (peer_frame.py).

A link is one of:
- `aead`: both ends offered the AEAD frame in the handshake (AES-256-GCM over the pickle);
- `fernet`: the cluster has a password, but the peer did not offer AEAD (an older version): the
  link stays on pysyncobj's Fernet frame;
- `plain`: no password (pickle and zlib, loopback only: loopback.py refuses anything else);
- `none`: no link now (the peer is down or unreachable, or the connection is still in its
  handshake). Every configured peer is reported, so a link that is down shows as `none` rather
  than vanishing from the answer.

Threads: the connections live on pysyncobj's tick thread, and this is read from others (a scrape,
/health). It never iterates a dictionary the tick thread mutates: each peer's connection is found
with one lookup per dictionary (atomic under the GIL), and each connection attribute is read once.
The address-to-node map changes only when membership does (construction and destroy); the
connection map gains or replaces a value when a peer dials in, which a lookup tolerates.
"""

from __future__ import annotations

from typing import Any, TypedDict

from pysyncobj.tcp_connection import CONNECTION_STATE

from queen_raft.raft.peer_frame import offers_aead

AEAD = "aead"
FERNET = "fernet"
PLAIN = "plain"
NONE = "none"
FRAME_KINDS = (AEAD, FERNET, PLAIN, NONE)


class PeerLink(TypedDict):
    frame: str  # one of FRAME_KINDS
    # AEAD frames over the current connection, each way; both start at 0 when the link
    # (re)connects, and stay 0 on a link that is not `aead`.
    aeadFramesSent: int
    aeadFramesReceived: int


def frame_kind(conn: Any) -> str:
    """The frame of one connection (a FastTcpConnection, or None for a peer never connected)."""
    if conn is None or conn.state != CONNECTION_STATE.CONNECTED:
        return NONE
    if conn.encryptor is None:
        return PLAIN
    # The peer's handshake key, read once: None until it arrived (or after a disconnect).
    peer_key = conn.sendRandKey
    if not peer_key:
        return NONE
    # What FastTcpConnection.peer_reads_aead is set from, derived here from one read so that a
    # scrape during the handshake never sees the key without the decision.
    return AEAD if conn.frame_master is not None and offers_aead(peer_key) else FERNET


def link_view(conn: Any) -> PeerLink:
    kind = frame_kind(conn)
    if kind != AEAD:
        return {"frame": kind, "aeadFramesSent": 0, "aeadFramesReceived": 0}
    return {"frame": kind, "aeadFramesSent": int(conn.aead_frames_sent),
            "aeadFramesReceived": int(conn.aead_frames_received)}


def peer_links(transport: Any, peer_addrs: list[str]) -> dict[str, PeerLink]:
    """Each configured peer's link, by its Raft address (its identity, not a dial-map address)."""
    nodes = transport._nodeAddrToNode
    connections = transport._connections
    links = {}
    for addr in peer_addrs:
        node = nodes.get(addr)
        links[addr] = link_view(connections.get(node) if node is not None else None)
    return links
