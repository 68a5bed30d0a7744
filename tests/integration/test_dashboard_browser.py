"""GET /dashboard in a real browser (Debian's headless Chromium over the DevTools Protocol) against
a three-node cluster: the leader shown, a scheduled timer listed and gone once it fired, the prefix
search, cancel with its confirmation, the DLQ and its replay, a read-only token without the
buttons it would be refused, the server's message for a bad token, the new leader after a kill,
each node's peer links by node id (a link down after the kill), and no error in the page's console. Screenshots of each view go to tests/artifacts/dashboard/
(git-ignored), to look at."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from cluster_fixture import node_cluster, token  # noqa: F401 (the fixture)
from headless_chromium import Browser

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"
QUEUE = "dash-q"
FAR_MS = 600_000
# Long enough to be listed first (the views before take a few refreshes), short enough to wait for.
SOON_MS = 8_000


def schedule(cluster, key: str, delay_ms: int) -> None:
    status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": [
        {"op": "schedule", "queue": QUEUE, "timerKey": key, "delayMs": delay_ms, "txn": f"txn-{key}",
         "payload": "eyJoaSI6MX0="}]})
    assert status == 200, body


def dead_letter_one(cluster, queue: str) -> None:
    rw = token("acme", "read-write")
    status, _, body = cluster.call("n2", "POST", "/api/v1/push", rw,
                                   {"items": [{"queue": queue, "payload": {"n": 1}, "transactionId": "dash-dlq-1"}]})
    assert status == 201, body
    status, _, popped = cluster.call("n2", "GET", f"/api/v1/pop/queue/{queue}?batch=1", rw)
    assert status == 200 and popped["messages"], popped
    message = popped["messages"][0]
    status, _, acked = cluster.call("n2", "POST", "/api/v1/ack", rw, {
        "leaseId": popped["leaseId"], "acknowledgments": [
            {"partition": message["partition"], "offset": message["offset"], "status": "dlq", "error": "poison"}]})
    assert status == 200 and acked["results"][0]["success"], acked


def page_url(cluster, node_id: str, **fragment: str) -> str:
    return f"{cluster.url(node_id)}/dashboard#" + "&".join(f"{k}={v}" for k, v in fragment.items())


# The leader hint's link, or "this node leads" when the page's node leads acme (no hint then).
LEADER_HINT_JS = """(() => {
  const link = document.querySelector('#lag-leader-hint a');
  if (link) return link.href;
  const view = page.overview && page.overview.nodes.find((n) => n.node === page.overview.node);
  return view && view.groups.acme && view.groups.acme.role === 'leader' && document.getElementById('lag-chart')
    ? 'this node leads' : null;
})()"""


# Per node row of a group: its peer links as "peer frame badge-style" (the style is what stands out).
def links_js(tenant: str) -> str:
    return f"""JSON.stringify(Object.fromEntries([...document.querySelectorAll(
  'section[data-tenant={json.dumps(tenant)}] tr[data-node]')].map((tr) => [tr.dataset.node,
  [...tr.querySelectorAll('td.links .badge')].map((b) => `${{b.dataset.peer}} ${{b.dataset.frame}} ${{b.className}}`)])))"""


def rows_js(selector: str) -> str:
    return f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.dataset.key || e.dataset.dlq)"


async def test_views_for_a_read_write_token(node_cluster):
    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    for key in ("alpha-1", "alpha-2", "beta-1"):
        schedule(cluster, key, FAR_MS)
    schedule(cluster, "soon", SOON_MS)
    dead_letter_one(cluster, "dash-dlq")
    async with Browser() as browser:
        await browser.open(page_url(cluster, "n2", token=token("acme", "read-write"), view="cluster"))
        assert await browser.wait_for(f"document.getElementById('leader-acme')?.textContent === {json.dumps(leader)}")
        assert "token" not in await browser.evaluate("location.hash")  # kept in sessionStorage instead
        await browser.screenshot(ARTIFACTS / "cluster.png")

        await browser.evaluate("location.hash = 'view=queues'")
        await browser.wait_for(f"document.querySelector('tr[data-queue={json.dumps(QUEUE)}]')")
        await browser.screenshot(ARTIFACTS / "queues.png")

        await browser.evaluate(f"location.hash = 'view=timers&queue={QUEUE}'")
        await browser.wait_for("document.querySelector('tr[data-key=\"soon\"]')")
        assert await browser.evaluate(rows_js("tr[data-key]")) == ["alpha-1", "alpha-2", "beta-1", "soon"]
        await browser.screenshot(ARTIFACTS / "timers.png")
        # The fired timer leaves the list on a later refresh.
        await browser.wait_for("!document.querySelector('tr[data-key=\"soon\"]')", timeout_s=20)

        await browser.evaluate(f"location.hash = 'view=timers&queue={QUEUE}&prefix=alpha'")
        await browser.wait_for(f"JSON.stringify({rows_js('tr[data-key]')}) === '[\"alpha-1\",\"alpha-2\"]'")

        # Peek, then cancel: the first click asks for the confirmation, the second cancels.
        await browser.evaluate("document.querySelector('tr[data-key=\"alpha-2\"] button[data-action=peek]').click()")
        await browser.wait_for("document.querySelector('#peek pre')?.textContent.includes('txn-alpha-2')")
        await browser.evaluate("document.querySelector('tr[data-key=\"alpha-2\"] button[data-action=cancel]').click()")
        await browser.wait_for("document.querySelector('tr[data-key=\"alpha-2\"] button.confirm')")
        status, _, still = cluster.call("n1", "GET", f"/api/v1/timers/{QUEUE}/alpha-2", token("acme", "read-only"))
        assert status == 200 and still["found"], "one click must not cancel"
        await browser.evaluate("document.querySelector('tr[data-key=\"alpha-2\"] button.confirm').click()")
        await browser.wait_for("document.getElementById('notice').textContent.includes('cancelled')")
        await browser.wait_for(f"JSON.stringify({rows_js('tr[data-key]')}) === '[\"alpha-1\"]'")

        await browser.evaluate("location.hash = 'view=firelag'")
        # A follower's page links to the leader's fire lag; a loaded machine may have moved the
        # leadership since the test began, so the link is checked against the page's own view.
        target = await browser.wait_for(LEADER_HINT_JS)
        others = {f"{cluster.url(n)}/dashboard#view=firelag" for n in cluster.node_ids if n != "n2"}
        assert target == "this node leads" or target in others, target
        await live_fire_lag_on_the_leader(cluster, cluster.role_of("acme", "leader"))

        await browser.evaluate("location.hash = 'view=dlq'")
        await browser.wait_for("document.querySelector('tr[data-dlq] button[data-action=replay]')")
        await browser.screenshot(ARTIFACTS / "dlq.png")
        await browser.evaluate("document.querySelector('tr[data-dlq] button[data-action=replay]').click()")
        await browser.wait_for("document.querySelector('tr[data-dlq] button.confirm')")
        await browser.evaluate("document.querySelector('tr[data-dlq] button.confirm').click()")
        await browser.wait_for("document.getElementById('notice').textContent.includes('Replayed')")
        await browser.wait_for("!document.querySelector('tr[data-dlq]')")
        assert browser.errors == []


async def live_fire_lag_on_the_leader(cluster, leader: str) -> None:
    """The leader's page draws p50 and p99 lines once timers fire while it is open."""
    async with Browser() as browser:
        await browser.open(page_url(cluster, leader, token=token("acme", "read-only"), view="firelag"))
        await browser.wait_for("document.getElementById('lag-chart')")
        for i in range(20):
            schedule(cluster, f"lag-{i}", 2500 + 100 * i)
        for line in ("p50", "p99"):
            await browser.wait_for(f"document.querySelector('#lag-chart polyline.{line}').getAttribute('points').split(' ').length >= 2",
                                   timeout_s=20)
        await browser.screenshot(ARTIFACTS / "firelag.png")
        assert browser.errors == []


async def test_a_read_only_token_sees_no_cancel_or_replay_button(node_cluster):
    cluster = node_cluster
    schedule(cluster, "ro-visible", FAR_MS)
    dead_letter_one(cluster, "dash-dlq-ro")
    async with Browser() as browser:
        await browser.open(page_url(cluster, "n3", token=token("acme", "read-only"), view="timers", queue=QUEUE))
        await browser.wait_for("document.querySelector('tr[data-key=\"ro-visible\"] button[data-action=peek]')")
        assert await browser.evaluate("document.querySelectorAll('button[data-action=cancel]').length") == 0
        await browser.screenshot(ARTIFACTS / "timers-read-only.png")
        await browser.evaluate("location.hash = 'view=dlq&dlqQueue=dash-dlq-ro'")
        await browser.wait_for("document.querySelector('tr[data-dlq]')")
        assert await browser.evaluate("document.querySelectorAll('button[data-action=replay]').length") == 0
        assert browser.errors == []


async def test_the_timer_list_pages_forward_and_back(node_cluster):
    cluster = node_cluster
    keys = [f"pg-{i:02d}" for i in range(52)]  # the page shows 50 a page
    status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": [
        {"op": "schedule", "queue": "dash-pages", "timerKey": key, "delayMs": FAR_MS, "txn": key, "payload": "e30="}
        for key in keys]})
    assert status == 200, body
    async with Browser() as browser:
        await browser.open(page_url(cluster, "n2", token=token("acme", "read-only"), view="timers", queue="dash-pages"))
        await browser.wait_for("document.querySelectorAll('tr[data-key]').length === 50")
        assert await browser.evaluate(rows_js("tr[data-key]")) == keys[:50]
        await browser.evaluate("[...document.querySelectorAll('button')].find(b => b.textContent.startsWith('Next')).click()")
        await browser.wait_for(f"JSON.stringify({rows_js('tr[data-key]')}) === '[\"pg-50\",\"pg-51\"]'")
        await browser.evaluate("[...document.querySelectorAll('button')].find(b => b.textContent.includes('Previous')).click()")
        await browser.wait_for("document.querySelectorAll('tr[data-key]').length === 50")
        assert browser.errors == []


async def test_a_refused_token_shows_the_servers_error(node_cluster):
    cluster = node_cluster
    async with Browser() as browser:
        await browser.open(page_url(cluster, "n1", token="not-a-token", view="cluster"))
        text = await browser.wait_for("!document.getElementById('error').hidden && document.getElementById('error').textContent")
        assert "401 unauthorized" in text, text
        await browser.screenshot(ARTIFACTS / "refused.png")
        # A write-only token may not read: the 403's own message is shown.
        await browser.evaluate(f"sessionStorage.setItem('queen-raft-token', {json.dumps(token('acme', 'write-only'))})")
        await browser.wait_for("document.getElementById('error').textContent.includes('403 forbidden: a write-only token')")
        assert browser.errors == []


# The acme leader the cluster view names, once it names one.
SHOWN_LEADER = "(t => t && t !== 'none' && t)(document.getElementById('leader-acme')?.textContent)"


async def test_the_cluster_view_names_the_new_leader_after_a_kill(node_cluster):
    cluster = node_cluster
    async with Browser() as browser:
        for _ in range(5):
            old = cluster.role_of("acme", "leader")
            watcher = next(n for n in cluster.node_ids if n != old)
            await browser.open(page_url(cluster, watcher, token=token("acme", "read-only"), view="cluster"))
            shown = await browser.wait_for(SHOWN_LEADER)
            if shown == old:
                break
            # The group elected another leader between the health read and the page's own (a
            # follower that missed heartbeats on a loaded machine): read both again.
        else:
            pytest.fail(f"the page and /health never agreed on acme's leader (last: {shown} against {old})")
        assert await asyncio.to_thread(cluster.stop_node, old, signal.SIGKILL) == -signal.SIGKILL
        try:
            new = await browser.wait_for(
                f"(t => t && t !== {json.dumps(old)} && t !== 'none' && t)(document.getElementById('leader-acme')?.textContent)",
                timeout_s=20)
            assert new in cluster.node_ids
            await browser.wait_for(f"document.querySelector('.card[data-node={json.dumps(old)}]')?.textContent.includes('unreachable')")
            # The survivors' links to the killed node show as down, and the group's summary warns.
            down = (f"document.querySelector('section[data-tenant=\"acme\"] tr[data-node={json.dumps(watcher)}] "
                    f"td.links .badge[data-peer={json.dumps(old)}]')")
            assert await browser.wait_for(f"{down}?.dataset.frame === 'none' && {down}.className === 'badge bad' "
                                          f"&& {down}.textContent === {json.dumps(old + ' down')}")
            summary = "document.querySelector('#links-acme .badge')"
            assert await browser.wait_for(f"{summary}.textContent.endsWith('not on aead') && {summary}.className === 'badge bad'")
            await browser.screenshot(ARTIFACTS / "cluster-after-kill.png")
        finally:
            cluster.start_node(old)
            await asyncio.to_thread(cluster.wait_ready)
        assert browser.errors == []


async def test_the_cluster_view_shows_each_nodes_peer_links_by_node_id(node_cluster):
    cluster = node_cluster
    expected = {n: [f"{peer} aead badge good" for peer in cluster.node_ids if peer != n] for n in cluster.node_ids}
    async with Browser() as browser:
        await browser.open(page_url(cluster, "n1", token=token("acme", "read-only"), view="cluster"))
        # A link is `none` until its handshake is done: poll until every link of every node is on aead.
        await browser.wait_for(f"{links_js('acme')} === {json.dumps(json.dumps(expected, separators=(',', ':')))}")
        texts = await browser.evaluate(
            "[...document.querySelectorAll('section[data-tenant=\"acme\"] td.links .badge')].map((b) => b.textContent)")
        assert sorted(texts) == sorted(f"{peer} aead" for n in cluster.node_ids for peer in cluster.node_ids if peer != n)
        assert await browser.evaluate("document.getElementById('links-acme').textContent") == " · peer links all 6 on aead"
        await browser.screenshot(ARTIFACTS / "cluster-links.png")
        assert browser.errors == []


async def test_the_queues_view_shows_each_queues_fires_per_second_on_the_leader(node_cluster):
    cluster = node_cluster
    leader = cluster.role_of("acme", "leader")
    follower = next(n for n in cluster.node_ids if n != leader)
    queue = "dash-rate"
    async with Browser() as browser:
        await browser.open(page_url(cluster, leader, token=token("acme", "read-only"), view="queues"))
        await browser.wait_for("document.getElementById('error').hidden && page.overview")
        status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": [
            {"op": "schedule", "queue": queue, "timerKey": f"r{i}", "delayMs": 1500 + 50 * i, "txn": f"rate-{i}",
             "payload": "e30="} for i in range(40)]})
        assert status == 200, body
        cell = f"document.querySelector('td[data-fires={json.dumps(queue)}]')"
        rate = await browser.wait_for(f"(c => c && parseFloat(c.textContent) > 0 && c.textContent)({cell})", timeout_s=20)
        assert float(rate) > 0
        await browser.screenshot(ARTIFACTS / "queues-fires.png")
        assert browser.errors == []
    async with Browser() as browser:
        # A follower does not count fires: its column shows a dash and the page links to the leader.
        await browser.open(page_url(cluster, follower, token=token("acme", "read-only"), view="queues"))
        link = await browser.wait_for("document.querySelector('#queues-leader-hint a')?.href")
        assert link == f"{cluster.url(leader)}/dashboard#view=queues", link
        assert await browser.evaluate(f"document.querySelector('td[data-fires={json.dumps(queue)}]').textContent") == "—"
        assert browser.errors == []
