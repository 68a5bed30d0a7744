"""GET /api/v1/overview (the dashboard's one read) and GET /dashboard (the page's static files)."""

from __future__ import annotations

import dataclasses
import re
import socket

from queen_raft.api.dashboard import load_assets
from queen_raft.api.overview import add_leaders_and_lag
from queen_raft.config import NodeConfig
from test_api_fake_group import START_MS, ApiHarness, cluster_config


async def test_the_token_rules_of_every_read_route():
    async with ApiHarness() as api:
        assert (await api.call("GET", "/api/v1/overview", token=None))[0] == 401
        assert (await api.call("GET", "/api/v1/overview", token="nope"))[0] == 401
        status, _, body = await api.call("GET", "/api/v1/overview", token="acme-wo")
        assert status == 403 and body["error"] == "forbidden"
        for token, may in (("acme-ro", {"cancel": False, "replay": False, "admin": False}),
                           ("acme-rw", {"cancel": True, "replay": True, "admin": False}),
                           ("acme-admin", {"cancel": True, "replay": True, "admin": True})):
            status, _, body = await api.call("GET", "/api/v1/overview", token=token)
            assert status == 200 and body["may"] == may and body["tenant"] == "acme", body


async def test_queues_counters_and_this_nodes_group_view_of_the_tokens_tenant():
    async with ApiHarness() as api:
        ops = [{"op": "schedule", "queue": "q", "timerKey": f"k{i}", "delayMs": 1000 * (i + 1), "txn": f"t{i}",
                "payload": "eA=="}
               for i in range(3)]
        assert (await api.call("POST", "/api/v1/timers", json={"operations": ops}))[0] == 200
        assert (await api.call("POST", "/api/v1/timers", token="globex-rw", json={"operations": [
            {"op": "schedule", "queue": "other", "timerKey": "g", "delayMs": 5, "txn": "g", "payload": "eA=="}]}))[0] == 200
        status, _, body = await api.call("GET", "/api/v1/overview", token="acme-ro")
        assert status == 200
        assert body["queues"] == [{"queue": "q", "pendingTimers": 3, "nextDueAt": START_MS + 1000,
                                   "unsettledMessages": 0, "dlqCount": 0}]
        assert body["counters"]["pendingTimers"] == 3 and body["schedulingPaused"] is False
        [node] = body["nodes"]
        assert node["node"] == "n1" and node["reachable"] and node["status"] == "healthy"
        assert node["groups"]["acme"]["leaderNode"] == "n1" and node["groups"]["acme"]["lag"] == 0
        assert body["fireLag"]["count"] == 0 and len(body["fireLag"]["bucketCounts"]) == len(body["fireLag"]["boundsSeconds"]) + 1


async def test_fires_by_queue_are_this_leaders_counts_of_the_tokens_tenant():
    async with ApiHarness() as api:
        status, _, body = await api.call("GET", "/api/v1/overview", token="acme-ro")
        assert status == 200 and body["firedByQueue"] == {}
        ops = [{"op": "schedule", "queue": queue, "timerKey": f"k{i}", "delayMs": 10, "txn": f"t{i}", "payload": "eA=="}
               for i, queue in enumerate(("payments", "payments", "emails"))]
        assert (await api.call("POST", "/api/v1/timers", json={"operations": ops}))[0] == 200
        # The leader's tick hook feeds the meter (node.py): here the fake group's tick, handed over.
        api.serving.metrics.observe_tick_result("acme", api.groups["acme"].advance(20))
        status, _, body = await api.call("GET", "/api/v1/overview", token="acme-ro")
        assert body["firedByQueue"] == {"payments": 2, "emails": 1}
        status, _, body = await api.call("GET", "/api/v1/overview", token="globex-ro")
        assert body["firedByQueue"] == {}


async def test_an_unreachable_peer_is_listed_not_fatal():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    async with ApiHarness() as api:
        config = api.serving.config
        api.serving.config = dataclasses.replace(config, nodes=(
            *config.nodes, NodeConfig(id="n2", host="127.0.0.1", http_port=closed_port, raft_port=7500)))
        status, _, body = await api.call("GET", "/api/v1/overview", token="acme-ro")
        assert status == 200
        n1, n2 = body["nodes"]
        assert n1["reachable"] and not n2["reachable"] and n2["error"] and n2["groups"] == {}


def test_lag_is_the_leaders_commit_index_minus_each_nodes_applied_index():
    config = cluster_config()
    config = dataclasses.replace(config, nodes=(
        *config.nodes, NodeConfig(id="n2", host="127.0.0.1", http_port=6633, raft_port=7500)))
    views = [
        {"node": "n1", "groups": {"acme": {"role": "follower", "leader": "127.0.0.1:7500", "term": 2,
                                           "commitIndex": 90, "appliedIndex": 88}}},
        {"node": "n2", "groups": {"acme": {"role": "leader", "leader": "127.0.0.1:7500", "term": 2,
                                           "commitIndex": 100, "appliedIndex": 100}}},
    ]
    add_leaders_and_lag(config, views)
    assert [v["groups"]["acme"]["lag"] for v in views] == [12, 0]
    assert [v["groups"]["acme"]["leaderNode"] for v in views] == ["n2", "n2"]
    views[1]["groups"]["acme"]["role"] = "candidate"
    add_leaders_and_lag(config, views)
    assert [v["groups"]["acme"]["lag"] for v in views] == [None, None]


def test_each_peer_links_raft_address_is_named_by_its_node_id():
    config = cluster_config()
    config = dataclasses.replace(config, nodes=(
        *config.nodes, NodeConfig(id="n2", host="127.0.0.1", http_port=6633, raft_port=7500)))
    n1_acme, n2_acme = (node.raft_addr(config.tenant("acme").index) for node in config.nodes)
    views = [
        {"node": "n1", "groups": {"acme": {"role": "leader", "leader": n1_acme,
                                           "peerLinks": {n2_acme: "aead", "10.9.9.9:7000": "none"}}}},
        # a node of an older version reports no peerLinks
        {"node": "n2", "groups": {"acme": {"role": "follower", "leader": n1_acme}}},
    ]
    add_leaders_and_lag(config, views)
    assert views[0]["groups"]["acme"]["peerLinkNodes"] == {n2_acme: "n2", "10.9.9.9:7000": None}
    assert views[1]["groups"]["acme"]["peerLinkNodes"] == {}


async def test_the_page_and_its_files_are_served_with_a_policy_that_keeps_them_on_this_node():
    async with ApiHarness() as api:
        status, headers, body = await api.call("GET", "/dashboard", token=None)
        assert status == 200 and headers["Content-Type"].startswith("text/html") and "/dashboard/app.js" in body
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert "/dashboard/peer-links.js" in body
        for name, kind in (("app.js", "text/javascript"), ("peer-links.js", "text/javascript"), ("style.css", "text/css")):
            status, headers, _ = await api.call("GET", f"/dashboard/{name}", token=None)
            assert status == 200 and headers["Content-Type"].startswith(kind)
        status, _, body = await api.call("GET", "/dashboard/missing.js", token=None)
        assert status == 404 and body["error"] == "not_found"


def test_the_shipped_files_name_no_other_host():
    assets = load_assets()
    assert {"index.html", "app.js", "peer-links.js", "style.css"} <= set(assets)
    for name, (content, _) in assets.items():
        text = content.decode("utf-8").replace("http://www.w3.org/2000/svg", "")  # a namespace name, never fetched
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), f"{name} names another host"
