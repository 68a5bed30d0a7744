// The Cluster view's peer links (loaded before app.js, whose h() and badge() it calls at render
// time): how a node's link to each peer of a group is framed, from its /health `peerLinks`, the
// peer named by its node id where the overview knows the address (`peerLinkNodes`).
"use strict";

// Anything but `aead` stands out during a rolling upgrade: `fernet` and `plain` as a warning,
// `none` (no link now) as down.
const LINK_STYLES = {
  aead: ["aead", "good", "AES-256-GCM frame"], fernet: ["fernet", "warn", "Fernet frame: the peer runs an older version"],
  plain: ["plain", "warn", "not encrypted: no Raft password"], none: ["down", "bad", "no link now: the peer is down or in its handshake"],
};

function peerLinkBadges(group) {
  // A node of a version before peerLinks reports none: unknown, not "no link".
  if (!group.peerLinks) return h("span", { class: "muted", title: "this node's version does not report its peer links" }, "not reported");
  const names = group.peerLinkNodes || {};
  // Peers by node id, then any address of no configured node.
  const links = Object.entries(group.peerLinks).map(([addr, frame]) => ({ addr, frame, peer: names[addr] || addr, known: !!names[addr] }))
    .sort((a, b) => (a.known === b.known ? a.peer.localeCompare(b.peer) : a.known ? -1 : 1));
  if (!links.length) return "—"; // a group of one node
  return links.map(({ addr, frame, peer }) => {
    const [label, kind, meaning] = LINK_STYLES[frame] || [frame, "warn", "an unknown frame"];
    return h("span", { class: `badge ${kind}`, "data-peer": peer, "data-frame": frame, title: `${addr}: ${meaning}` }, `${peer} ${label}`);
  });
}

// Every link of the group as seen from each reachable node: a rolling upgrade is done when all are on aead.
function linksSummary(overview, tenant) {
  const frames = overview.nodes.flatMap((node) => Object.values((node.groups[tenant] || {}).peerLinks || {}));
  if (!frames.length) return null;
  const off = frames.filter((frame) => frame !== "aead").length;
  const kind = frames.includes("none") ? "bad" : off ? "warn" : "good"; // a link down outranks an old frame
  return h("span", { class: "links-summary", id: `links-${tenant}` }, " · peer links ",
    badge(off ? `${off} of ${frames.length} not on aead` : `all ${frames.length} on aead`, kind));
}
