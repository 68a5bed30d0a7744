"""GET /dashboard: the operator's page, static files shipped in the package (queen_raft/dashboard/).

Public like /health: the page holds no data; everything it shows comes from the JSON API with the
token the operator types in (kept in the browser's sessionStorage, sent as a bearer header). The
Content-Security-Policy lets the page reach this node only: no script, style, image or call goes
anywhere else.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from queen_raft.api.errors import ApiError

CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A node upgraded in place serves its new page at once.
    "Cache-Control": "no-cache",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """{file name: (bytes, content type)} of the package's dashboard folder, read once at start."""
    folder = resources.files("queen_raft.dashboard")
    assets = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in CONTENT_TYPES:
            assets[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return assets


ASSETS_KEY = web.AppKey("dashboard_assets", dict)


def asset_response(request: web.Request, name: str) -> web.Response:
    found = request.app[ASSETS_KEY].get(name)
    if found is None:
        raise ApiError(404, "not_found", f"the dashboard has no file {name!r}")
    body, content_type = found
    return web.Response(body=body, content_type=content_type, charset="utf-8", headers=SECURITY_HEADERS)


async def get_page(request: web.Request) -> web.Response:
    return asset_response(request, "index.html")


async def get_asset(request: web.Request) -> web.Response:
    return asset_response(request, request.match_info["name"])


def add_routes(app: web.Application) -> None:
    app[ASSETS_KEY] = load_assets()
    app.router.add_get("/dashboard", get_page)
    app.router.add_get("/dashboard/", get_page)
    app.router.add_get("/dashboard/{name}", get_asset)
