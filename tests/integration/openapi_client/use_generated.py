"""Run with a generated `client` package on sys.path, argv: base URL, token. Schedules, peeks and
cancels one timer through the client openapi-python-client generated from the served document,
and prints what it saw as JSON."""

from __future__ import annotations

import json
import sys

from client import AuthenticatedClient
from client.api.queen import cancel_timer, peek_timer, schedule_timers
from client.models import ScheduleTimersBodyType0, TimerResult, TimerSchedule, TimerScheduleOp

base_url, token = sys.argv[1], sys.argv[2]
api = AuthenticatedClient(base_url=base_url, token=token, raise_on_unexpected_status=True)
op = TimerSchedule(op=TimerScheduleOp.SCHEDULE, queue="generated", timer_key="k-1", delay_ms=3_600_000,
                   txn="gen-txn-1", payload="eyJoaSI6MX0=")
scheduled = schedule_timers.sync(client=api, body=ScheduleTimersBodyType0(operations=[op]))
peeked = peek_timer.sync("generated", "k-1", client=api)
cancelled = cancel_timer.sync("generated", "k-1", client=api)
assert isinstance(cancelled, TimerResult), cancelled
print(json.dumps({
    "scheduled": scheduled.results[0].status.value,
    "peeked": {"found": peeked.found, "txn": peeked.txn, "payload": peeked.payload},
    "cancelled": cancelled.status.value,
}))
