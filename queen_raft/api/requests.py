"""Reading a request: its JSON body and its query parameters, each failure a 400 with the route's code."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from queen_raft.api import wire_json
from queen_raft.api.body import read_body
from queen_raft.api.errors import ApiError
from queen_raft.api.serving import serving_of


async def json_body(request: web.Request, bad_request_code: str) -> Any:
    """The body as JSON. Call it after the route's auth check: a refused caller's body is never read."""
    return parse_json(await body_bytes(request, bad_request_code), bad_request_code)


async def body_bytes(request: web.Request, bad_request_code: str) -> bytes:
    """The body's bytes, a 400 when there are none (every JSON route needs one)."""
    raw = await read_body(request, bad_request_code, serving_of(request).settings.http_body_timeout_s)
    if not raw:
        raise ApiError(400, bad_request_code, "the request has no body; a JSON body is required")
    return raw


def parse_json(raw: bytes, bad_request_code: str) -> Any:
    try:
        return wire_json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, bad_request_code, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, bad_request_code, "the body nests too deeply") from None


def query_int(request: web.Request, name: str, default: int, bad_request_code: str) -> int:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, bad_request_code, f"query parameter {name} must be an integer, got {text!r}") from None


def query_bool(request: web.Request, name: str, default: bool, bad_request_code: str) -> bool:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ApiError(400, bad_request_code, f"query parameter {name} must be true or false, got {text!r}")


# Integers a JSON client can send exactly (IEEE doubles); beyond, JavaScript clients round them,
# and msgpack cannot carry values past 64 bits: refuse them as bad input instead of failing later.
JSON_SAFE_INT = 2**53 - 1


def is_int(value: Any) -> bool:
    """JSON integers only: a bool is not a number here, 300.0 is not an integer delay, and an
    integer past 2^53 is not one a client can mean exactly."""
    return isinstance(value, int) and not isinstance(value, bool) and -JSON_SAFE_INT <= value <= JSON_SAFE_INT


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None,
                  floats_finite: bool = False) -> web.Response:
    """floats_finite: the caller vouches that every float of body is finite (wire_json.dumps_finite)."""
    return web.Response(
        status=status,
        body=(wire_json.dumps_finite if floats_finite else wire_json.dumps)(body),
        content_type="application/json",
        headers=headers or {},
    )
