"""A lone surrogate (an unpaired U+D800..U+DFFF) in any string of a request body is 400 with the
route's bad-request code, on every write route of the OpenAPI document; nothing is proposed. It is
not Unicode text: no entry (msgpack needs UTF-8) and no answer could carry it.

The routes are enumerated from the document, so a new write route fails here until it has a case."""

from __future__ import annotations

import pytest

from queen_raft.api.openapi import document
from test_api_fake_group import ApiHarness

# Two spellings: the JSON escape, and the raw (CESU-style) UTF-8 bytes of the surrogate.
SPELLINGS = {"escaped": b'"\\ud800"', "raw bytes": b'"\xed\xa0\x80"', "low half": b'"a\\udc00b"'}
S = b"@S@"  # where the surrogate string goes in a body template

# (method, documented path) -> (the path to call, body templates: each puts S in another string field)
BODY_ROUTES: dict[tuple[str, str], tuple[str, list[bytes]]] = {
    ("POST", "/api/v1/timers"): ("/api/v1/timers", [
        b'[{"op":"schedule","queue":@S@,"timerKey":"k","delayMs":1,"txn":"t","payload":""}]',
        b'{"operations":[{"op":"schedule","queue":"q","timerKey":"k","delayMs":1,"txn":@S@,"payload":""}]}',
        b'[{"op":"schedule","queue":"q","timerKey":@S@,"delayMs":1,"txn":"t","payload":"","partition":"p"}]',
        b'[{"op":"cancel","queue":"q","timerKey":"k","txn":@S@}]']),
    ("POST", "/api/v1/push"): ("/api/v1/push", [
        b'{"items":[{"queue":@S@,"payload":1}]}', b'{"items":[{"queue":"q","payload":{"a":[@S@]}}]}',
        b'{"items":[{"queue":"q","payload":{@S@:1}}]}', b'{"items":[{"queue":"q","payload":1,"traceId":@S@}]}']),
    ("POST", "/api/v1/ack"): ("/api/v1/ack", [
        b'{"leaseId":@S@,"offset":0}', b'{"leaseId":"l","offset":0,"status":"failed","error":@S@}']),
    ("POST", "/api/v1/ack/batch"): ("/api/v1/ack/batch", [
        b'{"leaseId":"l","acknowledgments":[{"transactionId":@S@}]}',
        b'{"leaseId":"l","consumerGroup":@S@,"acknowledgments":[{"offset":0}]}']),
    ("POST", "/api/v1/pop/queue/{queue}"): ("/api/v1/pop/queue/q", [
        b'{"leaseId":"l","acknowledgments":[{"transactionId":@S@}]}',
        b'{"leaseId":@S@,"acknowledgments":[{"offset":0}]}']),
    ("POST", "/api/v1/pop/queue/{queue}/partition/{partition}"): ("/api/v1/pop/queue/q/partition/p", [
        b'{"leaseId":"l","acknowledgments":[{"partition":@S@,"offset":0}]}']),
    ("POST", "/api/v1/lease/{leaseId}/extend"): ("/api/v1/lease/x/extend", [b'{"seconds":1,@S@:1}']),
    ("POST", "/api/v1/fetch"): ("/api/v1/fetch", [b'{"entries":[{"queue":@S@}]}',
                                                  b'{"entries":[{"queue":"q","partition":@S@}]}']),
    ("POST", "/api/v1/configure"): ("/api/v1/configure", [b'{"queue":@S@,"options":{}}',
                                                          b'{"queue":"q","options":{},"mode":@S@}']),
    ("POST", "/api/v1/transaction"): ("/api/v1/transaction", [
        b'{"kv":[{"op":"put","ns":"n","key":"k","value":@S@}]}',
        b'{"operations":[{"type":"push","queue":@S@,"payload":1}]}',
        b'{"timers":[{"op":"schedule","queue":"q","timerKey":@S@,"delayMs":1,"txn":"t","payload":""}]}']),
    ("POST", "/api/v1/kv"): ("/api/v1/kv", [b'{"ops":[{"op":"get","ns":@S@,"key":"k"}]}',
                                            b'{"ops":[{"op":"put","ns":"n","key":"k","value":[1,@S@]}]}']),
    ("PUT", "/api/v1/kv/{ns}/{key}"): ("/api/v1/kv/n/k", [b'{"value":@S@}', b'{"value":{@S@:1}}']),
}
# Routes that read no body: nothing a client sends reaches a string of theirs as a lone surrogate
# (a path or query is percent-decoded as UTF-8, whose bytes for a surrogate are invalid and stay
# as sent). They are called with those bytes in the path or query and must answer as documented.
BODYLESS_ROUTES: dict[tuple[str, str], str] = {
    ("DELETE", "/api/v1/timers/{queue}/{timerKey}"): "/api/v1/timers/q/%ED%A0%80?txn=%ED%A0%80",
    ("DELETE", "/api/v1/kv/{ns}/{key}"): "/api/v1/kv/n/%ED%A0%80",
    ("POST", "/api/v1/dlq/{dlqId}/replay"): "/api/v1/dlq/%ED%A0%80/replay",
    ("POST", "/api/v1/admin/timers/pause"): "/api/v1/admin/timers/pause",
    ("POST", "/api/v1/admin/timers/resume"): "/api/v1/admin/timers/resume",
    ("GET", "/api/v1/pop/queue/{queue}"): "/api/v1/pop/queue/%ED%A0%80?consumerGroup=%ED%A0%80",
    ("GET", "/api/v1/pop/queue/{queue}/partition/{partition}"): "/api/v1/pop/queue/q/partition/%ED%A0%80",
}
BAD_REQUEST_CODE = {("POST", "/api/v1/timers"): "timers_bad_request"}


def write_routes() -> set[tuple[str, str]]:
    """Every documented route that changes state: each POST, PUT and DELETE, and pop (a GET that
    takes a lease)."""
    routes = set()
    for path, methods in document()["paths"].items():
        for method in methods:
            if method in ("post", "put", "delete") or path.startswith("/api/v1/pop/"):
                routes.add((method.upper(), path))
    return routes


def test_every_write_route_has_a_case():
    assert write_routes() == BODY_ROUTES.keys() | BODYLESS_ROUTES.keys()


CASES = [(route, template, spelling) for route, (_, templates) in sorted(BODY_ROUTES.items())
         for template in templates for spelling in SPELLINGS]


@pytest.mark.parametrize("route,template,spelling", CASES,
                         ids=[f"{m} {p} #{BODY_ROUTES[(m, p)][1].index(t)} {s}" for (m, p), t, s in CASES])
async def test_a_lone_surrogate_in_a_body_is_400_with_the_routes_code(route, template, spelling):
    method, _ = route
    path = BODY_ROUTES[route][0]
    async with ApiHarness() as api:
        status, _, body = await api.call(method, path, token="acme-admin", data=template.replace(S, SPELLINGS[spelling]))
        assert status == 400, body
        assert body["error"] == BAD_REQUEST_CODE.get(route, "bad_request")
        assert "surrogate" in body["message"]
        if path == "/api/v1/transaction":
            assert (body["success"], body["reason"]) == (False, "bad_request")
        assert all(group.writes() == [] for group in api.groups.values())


@pytest.mark.parametrize("route", sorted(BODYLESS_ROUTES), ids=[f"{m} {p}" for m, p in sorted(BODYLESS_ROUTES)])
async def test_a_route_without_a_body_answers_surrogate_bytes_as_documented(route):
    method, _ = route
    async with ApiHarness() as api:  # the harness checks the answer against the document
        status, _, body = await api.call(method, BODYLESS_ROUTES[route], token="acme-admin",
                                         data=b'{"stray":"\\ud800"}')
        assert status < 500, body


async def test_a_surrogate_pair_is_text_and_is_kept():
    async with ApiHarness() as api:
        status, _, body = await api.call("PUT", "/api/v1/kv/n/k", data=b'{"value":"\\ud83d\\ude00"}')
        assert (status, body["value"]) == (200, "\U0001F600")
