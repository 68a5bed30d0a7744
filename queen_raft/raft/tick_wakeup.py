"""Waking pysyncobj's tick thread for new commands: one pipe write per wake-up, not per command.

With appendEntriesUseBatch=False, every replicated call (`_applyCommand`, on the calling thread: our
asyncio loop) queues its command and then writes one byte to the SyncObj's wake-up pipe, so the tick
thread leaves poll() and appends it at once. Under load that is one write syscall per proposal on
the loop thread, and each write wakes the tick thread again, which then competes with the loop for
the GIL. A wake-up already written and not yet read says everything another one would.

CoalescingPipeNotifier writes only when no wake-up is pending. The tick thread clears the pending
flag *before* it drains the pipe (in the poller's read callback), and a caller queues its command
*before* it calls notify(). So a notify() skipped because the flag was set finds the tick thread
not yet past that clear: it will drain the pipe, return from poll() and run _checkCommandsToApply,
which takes every command queued so far, this one included. No command waits for the next
autoTickPeriod because of a skipped write. (The flag is a plain attribute: reads and writes of it
are atomic under the GIL.)

pysyncobj 0.3.17 builds its notifier through the module global `pysyncobj.syncobj.PipeNotifier`;
`install_tick_wakeup` replaces it (like journal.install_journal_factory). Overrides
PipeNotifier.notify and PipeNotifier.__onNewNotification; tests/unit/test_raft_recipe.py pins them.
"""

from __future__ import annotations

import pysyncobj.syncobj
from pysyncobj.pipe_notifier import PipeNotifier


class CoalescingPipeNotifier(PipeNotifier):
    def __init__(self, poller, callback=None):
        self.pending = False  # a byte is in the pipe that the tick thread has not begun to drain
        self.writes = 0
        self.skipped = 0
        super().__init__(poller, callback)

    def notify(self):  # any thread: the loop (proposals) or the tick thread (transport)
        if self.pending:
            self.skipped += 1
            return
        self.pending = True
        try:
            super().notify()
        except OSError:
            self.pending = False
            raise
        self.writes += 1

    def _PipeNotifier__onNewNotification(self, descr, eventMask):  # tick thread, in poll()
        self.pending = False  # first: a notify() from now on writes again
        PipeNotifier._PipeNotifier__onNewNotification(self, descr, eventMask)


def install_tick_wakeup() -> None:
    pysyncobj.syncobj.PipeNotifier = CoalescingPipeNotifier
