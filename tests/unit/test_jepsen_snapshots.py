"""The snapshot nemeses' eyes and hands: a node's live children from /proc, the wait for two writers,
and every node stopped at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jepsen.snapshots import (WriterWait, is_live, live_children, live_writers_of, outliving, snapshot_fault_notes,
                              wait_for_writers, writes_snapshot_of)
from jepsen.history import INFO, INVOKE, NEMESIS_PROCESS, Event

DEADLINE_S = 20.0


def _fake_process(proc: Path, pid: int, ppid: int, state: str = "S", comm: str = "python3",
                  tasks: dict[int, list[int]] | None = None) -> None:
    directory = proc / str(pid)
    directory.mkdir(parents=True)
    (directory / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194560\n")
    for tid, children in (tasks or {}).items():
        (directory / "task" / str(tid)).mkdir(parents=True)
        (directory / "task" / str(tid) / "children").write_text("".join(f"{c} " for c in children))


def test_children_of_every_thread_are_found_and_zombies_left_out(tmp_path):
    # The node forks its snapshot writer on the tick thread (tid 12), not on its main thread (10).
    _fake_process(tmp_path, 10, 1, tasks={10: [], 11: [20], 12: [21, 22]})
    _fake_process(tmp_path, 20, 10)
    _fake_process(tmp_path, 21, 10, comm="odd ) name (x")  # the command name may hold ") "
    _fake_process(tmp_path, 22, 10, state="Z")  # exited, not reaped: its writing is over
    assert live_children(10, tmp_path) == [20, 21]


def test_without_children_lists_the_parent_ids_are_scanned(tmp_path):
    _fake_process(tmp_path, 10, 1)
    (tmp_path / "10" / "task" / "10").mkdir(parents=True)  # no `children` file: CONFIG_PROC_CHILDREN off
    _fake_process(tmp_path, 30, 10)
    _fake_process(tmp_path, 31, 10, state="Z")
    _fake_process(tmp_path, 32, 99)
    (tmp_path / "self").mkdir()
    assert live_children(10, tmp_path) == [30]


def test_a_process_that_is_gone_has_no_children(tmp_path):
    assert live_children(4242, tmp_path) == []
    assert not is_live(4242, tmp_path)


def _wait_until(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


FORK_ON_A_THREAD = """
import os, sys, threading, time
def fork():
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    print(pid, flush=True)
threading.Thread(target=fork).start()
time.sleep(60)
"""


def test_a_real_child_forked_on_a_thread_is_seen_until_it_exits():
    parent = subprocess.Popen([sys.executable, "-c", FORK_ON_A_THREAD], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _wait_until(lambda: live_children(parent.pid), "the child") == [child]
        os.kill(child, signal.SIGKILL)
        # The parent never reaps it: a zombie, which no longer counts.
        _wait_until(lambda: not live_children(parent.pid), "the child to stop counting")
        assert not is_live(child)
    finally:
        parent.kill()
        parent.wait()


def test_the_wait_acts_once_two_nodes_write_and_not_before():
    # Each look asks n1, n2, n3 in turn; the third look is the first with writers on two nodes.
    looks = iter([{"n1": [5]}, {"n1": [5], "n3": []}, {"n1": [5], "n2": [6]}, {}])
    node_of = {1: "n1", 2: "n2", 3: "n3"}
    current: list[dict] = []

    def children(pid: int) -> list[int]:
        if pid == 1:
            current.append(next(looks))
        return current[-1].get(node_of[pid], [])

    wait = wait_for_writers({"n1": 1, "n2": 2, "n3": 3}, 2, timeout_s=DEADLINE_S, poll_s=0, children=children)
    assert wait.found and wait.looks == 3
    assert wait.to_json()["writers"] == {"n1": [5], "n2": [6]}


def test_the_wait_gives_up_at_its_bound_and_says_so():
    wait = wait_for_writers({"n1": 1, "n2": 2}, 2, timeout_s=0.05, poll_s=0.01, children=lambda pid: [7] if pid == 1 else [])
    assert not wait.found and wait.waited_s >= 0.05
    assert wait.to_json()["during_snapshot"] is False and wait.to_json()["writers"] == {"n1": [7]}


def test_the_wait_stops_when_the_run_stops():
    wait = wait_for_writers({"n1": 1}, 2, timeout_s=DEADLINE_S, poll_s=0.01, children=lambda pid: [], stop=lambda: True)
    assert not wait.found and wait.looks == 1


def test_outliving_keeps_only_writers_still_running():
    assert outliving({"n1": [5, 6], "n2": [7], "n3": []}, is_alive=lambda pid: pid in (6, 7)) == {"n1": [6], "n2": [7]}
    assert outliving({"n1": [5]}, is_alive=lambda pid: False) == {}


def test_notes_say_what_each_snapshot_fault_met():
    start = {"fault": "stop-all-during-snapshot", "phase": "start"}
    done = dict(start, during_snapshot=True, waited_s=1.5, writers={"n1": [5], "n2": [6]},
                writers_outliving_nodes={"n2": [6]})
    events = [Event(NEMESIS_PROCESS, INVOKE, "stop-all-during-snapshot", start),
              Event(NEMESIS_PROCESS, INFO, "stop-all-during-snapshot", done),
              Event(NEMESIS_PROCESS, INFO, "kill-all", {"fault": "kill-all", "phase": "start"})]
    notes = snapshot_fault_notes(events, ("stop-all-during-snapshot", "kill-all-during-snapshot"))
    assert notes == ["stop-all-during-snapshot: during_snapshot=True after waiting 1.5 s; writers seen: n1 [5], "
                     "n2 [6]; writers outliving their nodes: n2 [6]"]


@pytest.mark.parametrize("found", [True, False])
def test_writer_wait_json_names_only_nodes_with_writers(found):
    wait = WriterWait(found, 0.1234, 3, {"n1": [], "n2": [9]})
    assert wait.to_json() == {"during_snapshot": found, "waited_s": 0.123, "looks": 3, "writers": {"n2": [9]}}


IGNORES_SIGTERM = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)"
EXITS_ON_SIGTERM = "import time\nprint('ready', flush=True)\ntime.sleep(60)"


def test_stop_all_signals_every_node_at_once_and_escalates_a_node_that_stays(monkeypatch, tmp_path):
    from jepsen import cluster as cluster_module
    from jepsen.nodes import NodeProcess

    monkeypatch.setattr(cluster_module, "STOP_GRACE_S", 1.0)
    cluster = cluster_module.Cluster.__new__(cluster_module.Cluster)
    cluster.nodes = {}
    for node_id, code in (("n1", EXITS_ON_SIGTERM), ("n2", IGNORES_SIGTERM), ("n3", IGNORES_SIGTERM), ("n4", None)):
        node = NodeProcess(node_id, 0, 0, tmp_path / f"{node_id}.log")
        if code is not None:
            node.process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            assert node.process.stdout.readline().strip() == "ready"  # its signal handling is in place
        cluster.nodes[node_id] = node
    started = time.monotonic()
    ended = cluster.stop_all(["n1", "n2", "n3", "n4"])
    assert ended == {"n1": f"exit {-signal.SIGTERM}", "n2": "killed after the grace period",
                     "n3": "killed after the grace period", "n4": "not running"}
    assert time.monotonic() - started < 1.9  # one grace period for all: one each would be 2 s
    assert all(node.process is None or node.process.poll() is not None for node in cluster.nodes.values())


def _open_files(proc: Path, pid: int, *targets: str) -> None:
    fd = proc / str(pid) / "fd"
    fd.mkdir(parents=True, exist_ok=True)
    for number, target in enumerate(targets, start=3):
        (fd / str(number)).symlink_to(target)  # dangling is fine: only the link's text is read


def test_a_writer_is_told_by_the_tenant_of_the_snapshot_it_writes(tmp_path):
    _fake_process(tmp_path, 10, 1, tasks={10: [20, 21, 22]})
    journals = ("/d/n1/jepsen/raft.journal", "/d/n1/jepsen-orders/raft.journal")  # inherited from the node
    _fake_process(tmp_path, 20, 10)
    _open_files(tmp_path, 20, *journals, "/d/n1/jepsen/raft.snapshot.writing.10.a1b2c3d4")
    _fake_process(tmp_path, 21, 10)
    _open_files(tmp_path, 21, *journals, "/d/n1/jepsen-orders/raft.snapshot.writing.10.e5f6a7b8")
    _fake_process(tmp_path, 22, 10)  # forked, not yet writing: only the inherited journals
    _open_files(tmp_path, 22, *journals)
    assert live_writers_of("jepsen", tmp_path)(10) == [20]
    assert live_writers_of("jepsen-orders", tmp_path)(10) == [21]
    assert not writes_snapshot_of(22, "jepsen", tmp_path) and not writes_snapshot_of(99, "jepsen", tmp_path)
