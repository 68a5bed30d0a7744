"""The dashboard's peer links in a real browser (headless Chromium), from a fixed overview answer
served beside the page's own files: each frame's label and style, a peer named by its node id or by
its address when no node has it, a node that does not report its links, and each group's summary.
A fixed answer shows what a running cluster shows only mid-upgrade (`fernet`) or never (`plain`)."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from headless_chromium import Browser
from queen_raft.api.dashboard import load_assets

pytestmark = pytest.mark.integration

N1, N2, N3 = "127.0.0.1:7400", "127.0.0.1:7500", "127.0.0.1:7600"
NAMES = {N1: "n1", N2: "n2", N3: "n3", "10.0.0.9:7400": None}


def group(role: str, links: dict[str, str] | None) -> dict:
    view = {"role": role, "leader": N1, "leaderNode": "n1", "term": 4, "commitIndex": 9, "appliedIndex": 9,
            "lag": 0, "problem": None}
    if links is not None:  # a node of a version before peerLinks reports neither
        view.update(peerLinks=links, peerLinkNodes={addr: NAMES[addr] for addr in links})
    return view


OVERVIEW = {
    "node": "n1", "tenant": "acme", "level": "read-only", "may": {"cancel": False, "replay": False, "admin": False},
    "nowMs": 0, "queues": [], "counters": {"fired": {}}, "schedulingPaused": False, "firedByQueue": {},
    "fireLag": {"boundsSeconds": [0.01], "bucketCounts": [0, 0], "count": 0, "sumSeconds": 0},
    "nodes": [
        {"node": "n1", "url": "http://n1", "reachable": True, "status": "healthy", "groups": {
            "acme": group("leader", {N3: "fernet", N2: "aead"}),
            "globex": group("leader", {N2: "aead", N3: "aead"})}},
        {"node": "n2", "url": "http://n2", "reachable": True, "status": "healthy", "groups": {
            "acme": group("follower", {N1: "aead", N3: "none", "10.0.0.9:7400": "plain"}),
            "globex": group("follower", {N1: "aead", N3: "aead"})}},
        {"node": "n3", "url": "http://n3", "reachable": True, "status": "healthy", "groups": {
            "acme": group("follower", None), "globex": group("follower", {N1: "aead", N2: "aead"})}},
    ],
}

CELLS_JS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('section[data-tenant="acme"] tr[data-node]')]
  .map((tr) => [tr.dataset.node, [...tr.querySelectorAll('td.links > span')].map((s) => `${s.textContent}|${s.className}`)])))"""


@pytest.fixture()
async def page_server():
    assets = load_assets()

    async def asset(request):
        body, kind = assets[request.match_info.get("name", "index.html")]
        return web.Response(body=body, content_type=kind)

    async def overview(request):
        return web.json_response(OVERVIEW)

    app = web.Application()
    app.router.add_get("/dashboard", asset)
    app.router.add_get("/dashboard/{name}", asset)
    app.router.add_get("/api/v1/overview", overview)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_each_frame_has_its_label_and_style_and_each_group_its_summary(page_server):
    async with Browser() as browser:
        await browser.open(f"{page_server}/dashboard#token=t&view=cluster")
        await browser.wait_for("document.querySelector('section[data-tenant=\"acme\"] td.links')")
        cells = json.loads(await browser.evaluate(CELLS_JS))
        assert cells == {
            "n1": ["n2 aead|badge good", "n3 fernet|badge warn"],
            "n2": ["n1 aead|badge good", "n3 down|badge bad", "10.0.0.9:7400 plain|badge warn"],
            "n3": ["not reported|muted"],
        }
        summary = "(id) => { const b = document.querySelector(`#links-${id} .badge`); return `${b.textContent}|${b.className}`; }"
        assert await browser.evaluate(f"({summary})('acme')") == "3 of 5 not on aead|badge bad"
        assert await browser.evaluate(f"({summary})('globex')") == "all 6 on aead|badge good"
        assert await browser.evaluate(
            "document.querySelector('tr[data-node=\"n1\"] .badge[data-peer=\"n3\"]').title") == f"{N3}: Fernet frame: the peer runs an older version"
        assert browser.errors == []
