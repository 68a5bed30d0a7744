"""`cluster status`'s peer links: per node and group, how the node's link to each peer is framed
(the group's `peerLinks` in the node's /health), each peer named by its node id.

- The `links` column reads `n2:aead,n3:fernet`: peers in the config's order (an address of no
  configured node as itself, after them), with no space, so that a script splitting a row on
  whitespace keeps its columns; `-` when the group has no peer (one node), `unreported` when the
  node's version does not report its links. `none` (no link now) reads `down`, as on the dashboard.
- Below the table, one line names every link not on `aead` (`peer links not on aead: n2->n1 down
  (acme), ...`); it is absent when every link reported is on `aead`, which is how a rolling
  upgrade is seen to be done. It does not change the exit status: that stays the nodes' health.
"""

from __future__ import annotations

AEAD = "aead"
DOWN = "down"
NO_LINKS = "-"
UNREPORTED = "unreported"
SUMMARY_PREFIX = "peer links not on aead:"


def frame_label(frame: object) -> str:
    return DOWN if frame == "none" else str(frame)


def named_links(peer_links: dict | None, node_by_raft_addr: dict[str, str],
                node_order: list[str]) -> list[tuple[str, str]] | None:
    """[(peer, frame)] of one group on one node: configured peers by node id in the config's order,
    then unknown addresses by address; None when the node reported no `peerLinks`."""
    if peer_links is None:
        return None
    named = [(node_by_raft_addr.get(addr, addr), frame) for addr, frame in peer_links.items()]
    rank = {node_id: i for i, node_id in enumerate(node_order)}
    return sorted(named, key=lambda link: (rank.get(link[0], len(rank)), link[0]))


def links_cell(links: list[tuple[str, str]] | None) -> str:
    """None: the node did not report its links."""
    if links is None:
        return UNREPORTED
    return ",".join(f"{peer}:{frame_label(frame)}" for peer, frame in links) or NO_LINKS


def not_on_aead(node_id: str, tenant: str, links: list[tuple[str, str]] | None) -> list[str]:
    return [f"{node_id}->{peer} {frame_label(frame)} ({tenant})" for peer, frame in links or () if frame != AEAD]


def links_summary(off: list[str]) -> list[str]:
    """The line below the table, or none when every link is on aead."""
    return [f"{SUMMARY_PREFIX} {', '.join(off)}"] if off else []
