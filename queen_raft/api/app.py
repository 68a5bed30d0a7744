"""The aiohttp application: routes, the JSON error shape for every failure, request timing."""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable

from aiohttp import web

from queen_raft.api import admin, dlq, harness_hooks, health, kv, messages, openapi, queues, timers, transaction
from queen_raft.api.errors import ApiError, error_response
from queen_raft.api.serving import SERVING_KEY, ServingNode

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def _route_label(request: web.Request) -> str:
    """The route's pattern, not the path: one series per route, whatever keys clients send."""
    route = request.match_info.route
    resource = getattr(route, "resource", None)
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def wire_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal answers {"error", "message"}; an unexpected exception is a 500, logged."""
    started = time.perf_counter()
    try:
        response = await handler(request)
    except ApiError as error:
        response = error.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = HTTP_ERROR_CODES.get(exc.status, "http_error")
        response = error_response(exc.status, code, exc.reason or code)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = error_response(500, "internal", "the node failed to answer; see its log")
    request.app[SERVING_KEY].metrics.observe_http_request(_route_label(request), response.status,
                                                          time.perf_counter() - started)
    return response


def create_app(serving: ServingNode) -> web.Application:
    app = web.Application(middlewares=[wire_errors], client_max_size=serving.settings.http_max_body_bytes)
    app[SERVING_KEY] = serving
    timers.add_routes(app)
    messages.add_routes(app)
    queues.add_routes(app)
    admin.add_routes(app)
    kv.add_routes(app)
    transaction.add_routes(app)
    dlq.add_routes(app)
    openapi.add_routes(app)
    health.add_routes(app)
    harness_hooks.add_routes(app)  # only with QUEEN_TEST_HOOKS=1
    return app
