"""The aiohttp application: routes, the JSON error shape for every failure, request timing."""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable

from aiohttp import web

from queen_raft.api import (admin, dashboard, dlq, harness_hooks, health, kv, messages, openapi, overview, pop_route,
                            queues, timers, transaction)
from queen_raft.api.client_errors import ClientErrorLog, CountedServerLog
from queen_raft.api.connections import ConnectionLimiter
from queen_raft.api.errors import ApiError, error_response
from queen_raft.api.serving import SERVING_KEY, ServingNode

log = logging.getLogger(__name__)

CLIENT_ERRORS_KEY = web.AppKey("client_errors", ClientErrorLog)
CONNECTIONS_KEY = web.AppKey("connections", ConnectionLimiter)
# How long an answered request's unread body is still drained (raw bytes: bodies are never
# inflated by the server, see api/body.py), so a client still sending reads the answer instead of
# a reset; past it the connection is closed.
LINGER_S = 2.0
# nginx's code for a request whose client closed the connection before the answer: it is only
# counted in the request metrics, since nobody is left to read it.
CLIENT_CLOSED_REQUEST = 499

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def _route_label(request: web.Request) -> str:
    """The route's pattern, not the path: one series per route, whatever keys clients send."""
    route = request.match_info.route
    resource = getattr(route, "resource", None)
    return resource.canonical if resource is not None else "unmatched"


def wire_errors(connections: ConnectionLimiter) -> Callable:
    """The one middleware: every refusal answers {"error", "message"}, an unexpected exception is
    a 500, logged; the request is timed; and its connection counts as busy while it is handled
    (connections.py). One layer, not one per concern: each layer is a coroutine and a wrapper
    more on every request."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        conn = connections.by_handler.get(request.protocol)  # None: served by another site (a test server)
        if conn is not None:
            connections.begin(conn)
        started = time.perf_counter()
        try:
            response = await handler(request)
        except ApiError as error:
            response = error.response()
        except ConnectionError as exc:  # the client left mid-request (mostly mid-body): its business
            request.app[CLIENT_ERRORS_KEY].note("client disconnected mid-request", f"{request.method} {request.path}: {exc}")
            response = web.Response(status=CLIENT_CLOSED_REQUEST)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = HTTP_ERROR_CODES.get(exc.status, "http_error")
            response = error_response(exc.status, code, exc.reason or code)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            response = error_response(500, "internal", "the node failed to answer; see its log")
        finally:
            if conn is not None:
                connections.end(conn)
        request.app[SERVING_KEY].metrics.observe_http_request(_route_label(request), response.status,
                                                              time.perf_counter() - started)
        return response

    return middleware


def create_app(serving: ServingNode) -> web.Application:
    settings = serving.settings
    client_errors = ClientErrorLog(logging.getLogger("queen_raft.api.client_errors"))
    connections = ConnectionLimiter(settings.http_max_connections, settings.http_header_timeout_s, client_errors)
    handler_args = {
        "auto_decompress": False,  # bodies are inflated by api/body.py, bounded, after auth
        "keepalive_timeout": settings.http_keepalive_timeout_s,
        "lingering_time": LINGER_S,
        "logger": CountedServerLog(logging.getLogger("aiohttp.server"), client_errors),
    }
    app = web.Application(middlewares=[wire_errors(connections)], client_max_size=settings.http_max_body_bytes,
                          handler_args=handler_args)
    app[SERVING_KEY] = serving
    app[CLIENT_ERRORS_KEY] = client_errors
    app[CONNECTIONS_KEY] = connections
    timers.add_routes(app)
    messages.add_routes(app)
    pop_route.add_routes(app)
    queues.add_routes(app)
    admin.add_routes(app)
    kv.add_routes(app)
    transaction.add_routes(app)
    dlq.add_routes(app)
    openapi.add_routes(app)
    health.add_routes(app)
    overview.add_routes(app)
    dashboard.add_routes(app)
    harness_hooks.add_routes(app)  # only with QUEEN_TEST_HOOKS=1
    return app
