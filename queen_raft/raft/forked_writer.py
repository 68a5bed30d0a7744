"""What a forked writer (a snapshot writer, a backup's encoder) asks of the kernel before it works:
to be the OOM killer's first choice, and to run only on CPU its node does not want.

A writer is a copy-on-write child of its node: it touches nearly every page of the state, so for
the seconds it runs it holds nearly a second copy of the node's memory. Should the machine run out,
the kernel's OOM killer must take the writer, which loses one snapshot attempt (the journal is kept
and the next turn writes again), rather than a node, which loses its tenants' service on this
machine until it restarts. The child raises its own oom_score_adj to OOM_SCORE_ADJ (as Redis does
for its background save child); raising needs no privilege. The node's own score is untouched.

A writer also takes a core for as long as it encodes (about 30 s at ten million timers), while the
node it copies keeps ticking, committing and answering. Where the nodes have fewer cores than they
and their writers want (three nodes on one small machine, containers with a CPU quota), a writer
at the nodes' own priority delays them: with three million pending and a writer per member after a
load, the 2,000/s fire lag's p99 was 58-114 ms in four runs at normal priority against 27-52 ms
with the writers under SCHED_IDLE (bench/README.md, "Ten million pending"). So a writer puts
itself under SCHED_IDLE, the Linux policy of work that runs only on otherwise idle CPU (a thread
of its node that wakes takes the CPU back at once), which needs no privilege either; where the
policy is not offered, nice 19. A writer on a machine whose CPUs are never idle still progresses
(SCHED_IDLE keeps a minimal share); it takes longer, and the compaction waits for it: the journal
keeps the entries meanwhile. The node's own scheduling is untouched.
"""

from __future__ import annotations

import os

# Between a normal process (0) and the most preferred victim (1000): a writer goes before any node,
# and an operator's own choice of 1000 for something else still goes first.
OOM_SCORE_ADJ = 800
OOM_SCORE_ADJ_PATH = "/proc/self/oom_score_adj"
# The lowest priority nice offers, where SCHED_IDLE is not.
WRITER_NICE = 19


def prefer_this_process_for_the_oom_killer(path: str = OOM_SCORE_ADJ_PATH) -> bool:
    """In the forked child, before it writes: True if the score was raised. Never raises (no /proc,
    a sandbox that forbids it: the writer works as before); the child must not log (see callers)."""
    try:
        with open(path, "w") as file:
            file.write(str(OOM_SCORE_ADJ))
        return True
    except OSError:
        return False


def yield_the_cpu_to_the_node() -> str:
    """In the forked child, before it writes: the policy it now runs under ("idle", "nice" or
    "normal" when neither could be set). Never raises (see prefer_this_process_for_the_oom_killer)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (OSError, AttributeError):  # not Linux, or a sandbox that refuses the call
        pass
    try:
        os.nice(WRITER_NICE)
        return "nice"
    except OSError:
        return "normal"
