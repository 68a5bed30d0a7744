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

CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A node upgraded in place serves its new page at once.
    "Cache-Control": "no-cache",
}


# The page's files in the package's dashboard folder (package data in pyproject.toml).
PAGE_FILES = ("index.html", "app.js", "peer-links.js", "style.css")


def load_assets() -> dict[str, tuple[bytes, str]]:
    """{file name: (bytes, content type)} of the page's files, read once at start."""
    folder = resources.files("queen_raft.dashboard")
    return {name: ((folder / name).read_bytes(), CONTENT_TYPES["." + name.rsplit(".", 1)[-1]]) for name in PAGE_FILES}


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
