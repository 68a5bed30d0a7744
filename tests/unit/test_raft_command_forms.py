"""Command forms during a rolling upgrade (queen_raft/raft/command_forms.py): a node proposes a
newer form only when every other member was last heard at its level; otherwise the older form,
which every version applies. The older form and the newer one leave the same state."""

from __future__ import annotations

from pysyncobj.transport import TCPTransport

from queen_raft.raft.command_forms import FORMS_KEY, FORMS_LEVEL, GROUP_FORMS_KEY, PUSH_ROWS_LEVEL, PeerForms
from queen_raft.raft.transport import GroupTransport
from queen_raft.state import TenantState
from test_api_fake_group import ApiHarness


def test_a_peer_counts_at_the_level_of_its_last_message_and_unknown_after_it_drops():
    forms = PeerForms()
    assert not forms.all_apply(1, ["a"])  # never heard: an older version
    assert forms.all_apply(1, [])  # no peer: a single-node group
    forms.heard("a", {"type": "next_node_idx", FORMS_KEY: 1})
    forms.heard("b", {"type": "next_node_idx"})  # an older version sends no level
    assert forms.all_apply(1, ["a"]) and not forms.all_apply(1, ["a", "b"])
    forms.heard("b", {"type": "append_entries", FORMS_KEY: 1})
    assert forms.all_apply(1, ["a", "b"])
    forms.heard("b", {"type": "append_entries"})  # restarted on older code
    assert not forms.all_apply(1, ["a", "b"])
    forms.heard("b", {FORMS_KEY: 1})
    forms.lost("b")  # its connection dropped: it may come back on other code
    assert not forms.all_apply(1, ["a", "b"]) and forms.level_of("b") == 0
    forms.heard("c", {FORMS_KEY: "1"})  # anything but an int is no level
    forms.heard("d", b"handshake")
    assert forms.level_of("c") == forms.level_of("d") == 0


def bare_transport(monkeypatch) -> tuple[GroupTransport, list, list]:
    transport = object.__new__(GroupTransport)
    transport.group_commit_journal = None
    transport.peer_forms = PeerForms()
    transport._nodes = {"n2", "n3"}
    sent, delivered = [], []
    monkeypatch.setattr(TCPTransport, "send", lambda self, node, message: sent.append((node, message)) or True)
    monkeypatch.setattr(TCPTransport, "_onMessageReceived", lambda self, node, message: delivered.append(message))
    monkeypatch.setattr(TCPTransport, "_onNodeDisconnected", lambda self, node: None)
    return transport, sent, delivered


def test_the_transport_stamps_what_it_sends_and_learns_its_peers_from_what_it_receives(monkeypatch):
    transport, sent, delivered = bare_transport(monkeypatch)
    transport.send("n2", {"type": "append_entries", "term": 3})
    assert sent == [("n2", {"type": "append_entries", "term": 3, FORMS_KEY: FORMS_LEVEL, GROUP_FORMS_KEY: 0})]
    assert not transport.peers_apply(PUSH_ROWS_LEVEL)
    transport._onMessageReceived("n2", {"type": "next_node_idx", FORMS_KEY: FORMS_LEVEL})
    assert not transport.peers_apply(PUSH_ROWS_LEVEL)  # n3 not heard yet
    transport._onMessageReceived("n3", {"type": "next_node_idx", FORMS_KEY: FORMS_LEVEL})
    assert transport.peers_apply(PUSH_ROWS_LEVEL)
    assert [m["type"] for m in delivered] == ["next_node_idx", "next_node_idx"]  # passed on as they came
    transport.send("n2", {"type": "append_entries", "term": 3})
    assert sent[-1][1][GROUP_FORMS_KEY] == FORMS_LEVEL  # it now vouches for the whole group
    transport._onNodeDisconnected("n3")
    assert not transport.peers_apply(PUSH_ROWS_LEVEL)
    transport.send("n2", {"type": "append_entries", "term": 3})
    assert sent[-1][1][GROUP_FORMS_KEY] == 0


def test_a_follower_that_never_hears_the_other_follower_trusts_the_leader_vouching_for_it():
    forms = PeerForms()
    peers = ["leader", "other-follower"]
    forms.heard("leader", {"type": "append_entries", FORMS_KEY: 1, GROUP_FORMS_KEY: 0})
    assert not forms.all_apply(1, peers)  # the leader has not heard the other follower yet
    forms.heard("leader", {"type": "append_entries", FORMS_KEY: 1, GROUP_FORMS_KEY: 1})
    assert forms.all_apply(1, peers) and forms.group_level(peers) == 0  # it vouches only for what it heard
    forms.heard("leader", {"type": "append_entries", FORMS_KEY: 1, GROUP_FORMS_KEY: 0})  # one went back
    assert not forms.all_apply(1, peers)
    forms.lost("leader")
    assert not forms.all_apply(1, peers)


async def push_and_answer(peers_level: int) -> tuple[dict, list[dict]]:
    async with ApiHarness() as api:
        group = api.groups["acme"]
        group.peers_level = peers_level
        status, _, answer = await api.call("POST", "/api/v1/push", token="acme-wo", json={"items": [
            {"queue": "q", "payload": {"n": 1}, "transactionId": "t1"},
            {"queue": "q", "partition": "eu", "payload": {"n": 2}, "transactionId": "t1"},
            {"queue": "q", "payload": {"n": 3}, "transactionId": "t1"}]})
        assert status == 201, answer
        [command] = [c for c in group.proposed if c["op"] == "push"]
        # messageIds are minted per call: the rest of each answer must match
        return command, [{k: v for k, v in r.items() if k != "messageId"} for r in answer["results"]]


async def test_a_push_is_proposed_as_rows_only_when_every_peer_applies_them():
    older, older_answers = await push_and_answer(0)
    newer, newer_answers = await push_and_answer(PUSH_ROWS_LEVEL)
    assert "items" in older and "rows" not in older
    assert "rows" in newer and "items" not in newer
    assert len(older["items"]) == len(newer["rows"]) == 3
    assert older_answers == newer_answers  # queued, queued in eu, duplicate of the first
    assert [r["status"] for r in older_answers] == ["queued", "queued", "duplicate"]


def test_the_group_level_kept_between_sends_follows_every_change():
    forms = PeerForms()
    peers = {"a", "b"}
    forms.heard("a", {FORMS_KEY: 1})
    forms.heard("b", {FORMS_KEY: 1})
    assert forms.group_level(peers) == 1
    assert forms.group_level(peers | {"c"}) == 0  # a member never heard from
    assert forms.group_level(peers) == 1
    forms.heard("b", {FORMS_KEY: 0})
    assert forms.group_level(peers) == 0
    forms.heard("b", {FORMS_KEY: 1})
    assert forms.group_level(peers) == 1
    forms.lost("a")
    assert forms.group_level(peers) == 0
