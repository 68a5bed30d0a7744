"""What a forked writer (a snapshot writer, a backup's encoder) asks of the kernel before it works.

A writer is a copy-on-write child of its node: it touches nearly every page of the state, so for
the seconds it runs it holds nearly a second copy of the node's memory. Should the machine run out,
the kernel's OOM killer must take the writer, which loses one snapshot attempt (the journal is kept
and the next turn writes again), rather than a node, which loses its tenants' service on this
machine until it restarts. The child raises its own oom_score_adj to OOM_SCORE_ADJ (as Redis does
for its background save child); raising needs no privilege. The node's own score is untouched.
"""

from __future__ import annotations

# Between a normal process (0) and the most preferred victim (1000): a writer goes before any node,
# and an operator's own choice of 1000 for something else still goes first.
OOM_SCORE_ADJ = 800
OOM_SCORE_ADJ_PATH = "/proc/self/oom_score_adj"


def prefer_this_process_for_the_oom_killer(path: str = OOM_SCORE_ADJ_PATH) -> bool:
    """In the forked child, before it writes: True if the score was raised. Never raises (no /proc,
    a sandbox that forbids it: the writer works as before); the child must not log (see callers)."""
    try:
        with open(path, "w") as file:
            file.write(str(OOM_SCORE_ADJ))
        return True
    except OSError:
        return False
