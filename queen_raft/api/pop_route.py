"""Pop routes (docs/spec.md section 3): `GET` pop with its long poll, and `POST` pop, which first
settles the acknowledgments its body carries and then pops.

A consumer's round is "ack the batch in hand, take the next one". As two calls it is two Raft
entries committed one after the other. `POST` pop proposes the ack command and the pop command in
the same loop iteration, so the proposal batcher (raft/proposal_batch.py) puts them in one entry,
the ack first: one commit round per consumer round. Should they land in two entries (the batch was
cut, a handoff from pysyncobj's thread flushed in between), they still apply in that order.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from queen_raft.api.auth import Access, require
from queen_raft.api.encryption import PayloadCipher
from queen_raft.api.errors import ApiError
from queen_raft.api.group_calls import propose, read
from queen_raft.api.ids import new_lease_id
from queen_raft.api.long_poll import wait_riding_tick
from queen_raft.api.messages import (
    BAD_REQUEST, DEFAULT_POP_TIMEOUT_MS, LONG_POLL_RECHECK_S, MAX_POP_TIMEOUT_MS, UNAVAILABLE, bad_request, check_name,
    parse_ack, wire_message,
)
from queen_raft.api.pop_answer import pop_answer_body
from queen_raft.api.requests import json_body, json_response, query_bool, query_int
from queen_raft.api.serving import ServingNode, serving_of
from queen_raft.state.limits import MAX_ANSWER_BYTES, MAX_POP_BATCH


@dataclass(frozen=True)
class PopCall:
    """One pop call as its query states it; `deadline` (monotonic) ends its long poll."""

    tenant: str
    queue: str
    partition: str | None
    group_name: str | None
    wait: bool
    deadline: float
    command_args: dict

    @property
    def turn_key(self) -> tuple:
        return (self.tenant, self.queue, self.partition, self.group_name)

    def deliverable(self, state: Any) -> bool:
        return bool(state.deliverable(self.queue, self.partition, self.group_name))


def pop_call_of(request: web.Request, tenant: str) -> PopCall:
    """The path and query of a pop (both methods take the same), a 400 when malformed."""
    queue = check_name(request.match_info["queue"], "queue", "the path")
    partition = check_name(request.match_info.get("partition"), "partition", "the path")
    group_name = check_name(request.query.get("consumerGroup") or None, "consumerGroup", "the query")
    batch = min(MAX_POP_BATCH, max(1, query_int(request, "batch", 1, BAD_REQUEST)))
    wait = query_bool(request, "wait", False, BAD_REQUEST)
    timeout_ms = min(MAX_POP_TIMEOUT_MS, max(0, query_int(request, "timeout", DEFAULT_POP_TIMEOUT_MS, BAD_REQUEST)))
    auto_ack = query_bool(request, "autoAck", False, BAD_REQUEST)
    command_args = {"op": "pop", "queue": queue, "partition": partition, "consumerGroup": group_name,
                    "batch": batch, "autoAck": auto_ack, "maxBytes": MAX_ANSWER_BYTES}
    deadline = time.monotonic() + (timeout_ms / 1000.0 if wait else 0.0)
    return PopCall(tenant, queue, partition, group_name, wait, deadline, command_args)


async def _pop_once(serving: ServingNode, tenant: str, command_args: dict) -> dict | None:
    command = dict(command_args, leaseId=new_lease_id())
    return _pop_answer(await propose(serving, tenant, command, UNAVAILABLE))


def _pop_answer(result: dict) -> dict | None:
    if "error" in result:
        raise ApiError(400 if result["error"] == BAD_REQUEST else 500, result["error"], result.get("message") or "pop refused")
    return result if result.get("messages") else None


def _pop_response(result: dict, cipher: PayloadCipher | None, extra: dict | None = None) -> web.Response:
    """The pop's answer; `extra` (POST pop's acknowledgments) joins its fields."""
    body = pop_answer_body(result, extra)  # each JSON payload as its stored bytes (pop_answer.py)
    if body is not None:
        return web.Response(body=body, content_type="application/json")
    return json_response({"leaseId": result.get("leaseId"),
                          "messages": [wire_message(m, cipher) for m in result["messages"]], **(extra or {})},
                         floats_finite=True)


async def pop_until_deadline(serving: ServingNode, call: PopCall, request: web.Request, ready: bool,
                             seen: int, confirmed: bool) -> dict | None:
    """The pop answer with messages, or None once the call's deadline passed (or its client left).
    `ready`: this replica's state, seen with apply generation `seen`, has something deliverable.
    `confirmed`: a read barrier or a write that began after the call has passed (else one passes
    before the None that says nothing came).

    The long poll waits on applies and proposes a pop only when the state says one would return
    something, so an idle consumer adds no log entries beyond one read barrier per
    LONG_POLL_RECHECK_S (on the leader, while it waits, its pop rides the tick entries)."""
    group = serving.groups[call.tenant]
    signal = serving.apply_signals[call.tenant]
    while True:
        if ready:
            async with serving.pop_turns.turn(call.turn_key):
                # A waiter whose turn came before ours may have taken what woke us: look again,
                # after its pop was applied here, before proposing one.
                result = (await _pop_once(serving, call.tenant, call.command_args)
                          if group.peek_local(call.deliverable) else None)
            if result is not None:
                return result
        remaining = call.deadline - time.monotonic()
        if request.transport is None or request.transport.is_closing():
            return None
        if remaining <= 0:
            if confirmed:
                return None
            ready, confirmed = await read(serving, call.tenant, call.deliverable, UNAVAILABLE), True
            continue
        applied, rode = await wait_riding_tick(group, signal, call.turn_key, call.command_args,
                                               min(remaining, LONG_POLL_RECHECK_S), seen)
        seen = signal.generation
        result = None if rode is None else _pop_answer(rode)
        if result is not None:
            return result
        if applied:
            ready = group.peek_local(call.deliverable)
        else:
            ready, confirmed = await read(serving, call.tenant, call.deliverable, UNAVAILABLE), True


async def get_pop(request: web.Request) -> web.Response:
    """A pop is a write (it takes a lease); 204 when nothing came within the wait."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    call = pop_call_of(request, principal.tenant)
    group = serving.groups[call.tenant]
    # A pop right after an acknowledged push must see it, and this replica may not have applied it
    # yet, so an empty answer (204) is given only after a read barrier that began after the call
    # did. When something is deliverable here, the pop is proposed at once: it is a write, ordered
    # after every acknowledged one. A long poll that finds nothing waits at once, its pop parked to
    # ride the next tick (long_poll.py): what this replica has yet to apply wakes it as it applies,
    # and the barrier comes only if the wait ends empty, so a consumer coming back for the next
    # fires costs no commit round of its own.
    seen = serving.apply_signals[call.tenant].generation
    ready = confirmed = group.peek_local(call.deliverable)
    if not ready and not call.wait:
        ready, confirmed = await read(serving, call.tenant, call.deliverable, UNAVAILABLE), True
    result = await pop_until_deadline(serving, call, request, ready, seen, confirmed)
    return web.Response(status=204) if result is None else _pop_response(result, serving.cipher)


# --- POST pop: settle, then pop ----------------------------------------------------------------


def ack_command_of(body: Any, call: PopCall) -> dict:
    """The ack command of a POST pop's body: the body `POST /api/v1/ack/batch` takes, checked the
    same way. Its consumerGroup defaults to the query's, and may not name another: one call is one
    consumer of one group."""
    command = parse_ack(body, single=False)
    if command["consumerGroup"] is None:
        command["consumerGroup"] = call.group_name
    elif command["consumerGroup"] != call.group_name:
        raise bad_request(f"the body's consumerGroup {command['consumerGroup']!r} is not the query's "
                          f"({call.group_name!r}): one call settles and pops for one consumer group")
    return command


async def _pop_unless_refused(serving: ServingNode, call: PopCall, settling: asyncio.Future) -> dict:
    # The ack's task ran its first step just before this one (same loop iteration, in order): it
    # either joined the proposal batch, or was refused before proposing (no leader, too large,
    # busy), and then nothing is popped: the call fails as the ack did.
    if settling.done():
        settling.result()
    return await propose(serving, call.tenant, dict(call.command_args, leaseId=new_lease_id()), UNAVAILABLE)


async def settle_then_pop(serving: ServingNode, call: PopCall, ack_command: dict) -> tuple[dict, dict]:
    """(the ack's result, the pop's result), both proposed in one loop iteration, the ack first.
    A failure of either is the call's (the ack's first): a 503 says the outcome may be unknown,
    and a retried ack answers as its first try did."""
    settling = asyncio.ensure_future(propose(serving, call.tenant, ack_command, UNAVAILABLE))
    popping = asyncio.ensure_future(_pop_unless_refused(serving, call, settling))
    acked, popped = await asyncio.gather(settling, popping, return_exceptions=True)
    for outcome in (acked, popped):
        if isinstance(outcome, BaseException):
            raise outcome
    assert isinstance(acked, dict) and isinstance(popped, dict)
    if "error" in acked:
        raise ApiError(400 if acked["error"] == BAD_REQUEST else 500, acked["error"], acked.get("message") or "ack refused")
    return acked, popped


async def post_pop(request: web.Request) -> web.Response:
    """Settle the body's acknowledgments, then pop. Never 204: with nothing to deliver after the
    wait, 200 with `messages: []`, since the acknowledgments' verdicts must reach the consumer."""
    serving = serving_of(request)
    principal = require(serving.config, request, Access.CONSUME)
    call = pop_call_of(request, principal.tenant)
    ack_command = ack_command_of(await json_body(request, BAD_REQUEST), call)
    acked, popped = await settle_then_pop(serving, call, ack_command)
    verdicts = {"acknowledgments": acked["results"]}
    result = _pop_answer(popped)
    if result is None and call.wait:
        # The acks are settled (applied here): wait as a GET long poll does, from this state.
        seen = serving.apply_signals[call.tenant].generation
        ready = serving.groups[call.tenant].peek_local(call.deliverable)
        # The pop just applied here was a write proposed after the call began: it confirms.
        result = await pop_until_deadline(serving, call, request, ready, seen, confirmed=True)
    if result is None:
        return json_response({"leaseId": None, "messages": [], **verdicts}, floats_finite=True)
    return _pop_response(result, serving.cipher, verdicts)


def add_routes(app: web.Application) -> None:
    for path in ("/api/v1/pop/queue/{queue}", "/api/v1/pop/queue/{queue}/partition/{partition}"):
        app.router.add_get(path, get_pop)
        app.router.add_post(path, post_pop)
