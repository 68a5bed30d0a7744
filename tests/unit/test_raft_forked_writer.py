"""A forked writer's requests to the kernel (queen_raft/raft/forked_writer.py): its CPU policy.
(Its OOM score is tested with the writers that ask for it: test_raft_snapshot.py,
test_api_snapshot_route.py.)"""

from __future__ import annotations

import os

from queen_raft.raft import forked_writer
from queen_raft.raft.forked_writer import WRITER_NICE, yield_the_cpu_to_the_node


def in_a_child(work) -> str:
    """Runs work() in a forked child (its policy and niceness cannot be undone) and returns what
    it returned, as text."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, str(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        answer = reader.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return answer


def test_a_writer_runs_under_sched_idle_and_its_parent_keeps_its_policy():
    before = os.sched_getscheduler(0)

    def work():
        return f"{yield_the_cpu_to_the_node()} {os.sched_getscheduler(0)}"

    assert in_a_child(work) == f"idle {os.SCHED_IDLE}"
    assert os.sched_getscheduler(0) == before != os.SCHED_IDLE


def test_where_sched_idle_is_refused_the_writer_takes_the_lowest_nice():
    def work():
        def refuse(*args):
            raise PermissionError("not here")

        forked_writer.os.sched_setscheduler = refuse  # the child's own copy of the module
        return f"{yield_the_cpu_to_the_node()} {os.nice(0)} {os.sched_getscheduler(0)}"

    assert in_a_child(work) == f"nice {WRITER_NICE} {os.SCHED_OTHER}"
    assert os.nice(0) != WRITER_NICE
