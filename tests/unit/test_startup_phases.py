"""A node's start logs one line per phase (raft/startup_phases.py), and the recovery scenario of the
bench finds them in the restarted node's log with their time since the restart."""

from __future__ import annotations

import logging
import time

from bench.recovery import phase_lines
from queen_raft.raft.startup_phases import (
    log_phase,
    log_process_started,
    phase_clock,
    process_age_s,
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # the node's (cli/main.py)


def test_the_process_age_is_the_time_since_this_process_started():
    age = process_age_s()
    assert age is not None and 0 < age < time.monotonic() + 1


def test_the_bench_reads_each_phase_line_logged_after_the_restart(tmp_path):
    log_path = tmp_path / "n1.log"
    log_path.write_text("2000-01-01 00:00:00,000 INFO queen_raft.startup: startup phase=old seconds=1.000\n")
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger = logging.getLogger("queen_raft.startup")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    since = time.time() - 0.5
    try:
        log_process_started("n1")
        log_phase("journal_replay", time.monotonic() - 0.25, entries=12)
        logging.getLogger("queen_raft.node").warning("not a phase")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()
    lines = phase_lines(log_path, since)
    assert len(lines) == 2, lines
    assert lines[0].startswith("+") and "startup node=n1 phase=imports seconds=" in lines[0]
    offset, text = lines[1].split(" ", 1)
    assert 0.4 <= float(offset) < 5 and text.startswith("startup phase=journal_replay seconds=0.2")
    assert text.endswith(" entries=12")


def test_the_bench_keeps_a_phase_file_by_its_tenant_and_name_not_the_machine_path(tmp_path):
    log_path = tmp_path / "n1.log"
    log_path.write_text("2030-01-01 00:00:00,000 INFO queen_raft.startup: startup phase=journal_open "
                        "seconds=0.037 entries=818 file=/var/lib/queen/data-1/n1/acme/raft.journal\n")
    assert [line.split(" ", 1)[1] for line in phase_lines(log_path, 0.0)] == [
        "startup phase=journal_open seconds=0.037 entries=818 file=acme/raft.journal"]


def test_a_phase_started_with_its_clock_logs_the_cpu_seconds_of_its_thread(caplog):
    started = phase_clock()
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:  # work on this thread's CPU clock
        pass
    with caplog.at_level(logging.INFO, logger="queen_raft.startup"):
        log_phase("snapshot_restore", started, "state decoded and indexed", index=7)
    message = caplog.records[-1].getMessage()
    fields = dict(part.split("=", 1) for part in message.split(" (")[0].split()[1:])
    assert fields["phase"] == "snapshot_restore" and fields["index"] == "7"
    assert 0.05 <= float(fields["cpu_s"]) <= float(fields["seconds"]) + 0.01
