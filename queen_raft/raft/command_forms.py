"""Which command forms every member of a group can apply, so a rolling upgrade never diverges.

A newer version may add a form of a command (docs/commands.md): a push call as `rows` instead of a
map per item, for one. Every replica applies every entry, so a form a member does not know is
refused there and applied elsewhere: that member's state silently parts from the others', and a
snapshot it writes meanwhile keeps the difference after it restarts on the new code. Between the
first restart of an upgrade and the last, a group can have an upgraded leader and an old follower
(a leader restarted last hands its leadership to an upgraded member).

So a node proposes a newer form only once it knows that every other member applies it:

- every Raft message a node sends carries `FORMS_KEY: FORMS_LEVEL` (older nodes ignore the key;
  pysyncobj reads the keys it knows);
- a node keeps, per peer, the level of the last message it received from it (0 without the key: an
  older version), and forgets it when the connection drops (the peer may come back on other code);
- each message also carries `GROUP_FORMS_KEY`: the lowest level among its sender and every peer the
  sender heard from (0 for a peer it has not heard from), so a member that hears from everyone (the
  leader) vouches for the whole group;
- a route asks `peers_apply(level)`: true when every other member was last heard at that level or
  above, or when a peer last vouched for the whole group at that level. A peer never heard from
  counts as an older version. A single-node group has no peer.

The older form stays what a node falls back to: a cluster with one node not yet upgraded writes as
that node's version does, and moves to the new form by itself once the last node is upgraded. A
follower rarely hears from the other followers: the leader's messages vouch for them. When nobody
vouches for a member, a node proposes the older form, which every version applies.

Levels:
- 1: the `push` command's `rows` (state/push_rows.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Hashable

FORMS_KEY = "queenForms"
GROUP_FORMS_KEY = "queenGroupForms"
FORMS_LEVEL = 1
PUSH_ROWS_LEVEL = 1


def _level(value) -> int:
    return value if type(value) is int else 0


class PeerForms:
    """What each peer was last heard at, and the level it vouched for the whole group; the
    transport feeds it, the routes ask it."""

    def __init__(self) -> None:
        self._levels: dict[Hashable, int] = {}
        self._vouched: dict[Hashable, int] = {}
        # group_level's answer and the peer set it was for, until a level changes
        self._group_level: tuple[frozenset, int] | None = None

    def heard(self, node: Hashable, message) -> None:
        if isinstance(message, dict):
            level = _level(message.get(FORMS_KEY, 0))
            self._vouched[node] = _level(message.get(GROUP_FORMS_KEY, 0))
        else:
            level = self._vouched[node] = 0
        if self._levels.get(node) != level:
            self._levels[node] = level
            self._group_level = None

    def lost(self, node: Hashable) -> None:
        self._levels.pop(node, None)
        self._vouched.pop(node, None)
        self._group_level = None

    def level_of(self, node: Hashable) -> int:
        return self._levels.get(node, 0)

    def group_level(self, peers: set) -> int:
        """The lowest level of this node and every peer, as this node last heard them. Asked on
        every send: kept until a peer's level changes, a peer drops or the peer set changes."""
        cached = self._group_level
        if cached is None or cached[0] != peers:
            levels = self._levels
            cached = self._group_level = (frozenset(peers), min([FORMS_LEVEL, *(levels.get(node, 0) for node in peers)]))
        return cached[1]

    def all_apply(self, level: int, peers: Iterable[Hashable]) -> bool:
        levels, vouched = self._levels, self._vouched
        return all(levels.get(node, 0) >= level for node in peers) or \
            any(vouched.get(node, 0) >= level for node in peers)


def stamp(message, group_level: int) -> None:
    """Mark an outgoing Raft message with this node's level and the group's as this node knows it
    (in place: the receiver reads the keys, older versions ignore them)."""
    if type(message) is dict:
        message[FORMS_KEY] = FORMS_LEVEL
        message[GROUP_FORMS_KEY] = group_level
