"""The power nemesis's pure parts: which nodes each fault powers off, which power losses are torn,
which runs mount lazy filesystems, and the starts_after_power_loss check."""

from __future__ import annotations

import random

from jepsen.nemesis import NEMESES, plan_faults
from jepsen.power import (POWER_FAULTS, check_starts_after_power_loss, needs_lazy_fs, power_targets,
                          torn_seed)

THREE = ["n1", "n2", "n3"]
FIVE = ["n1", "n2", "n3", "n4", "n5"]


def test_power_one_is_the_drawn_node_and_power_all_is_every_node():
    assert power_targets("power-one", THREE, "n1", 4) == ["n2"]
    assert power_targets("power-all", THREE, "n1", 0) == THREE


def test_power_minority_is_the_leader_and_stays_a_minority():
    assert power_targets("power-minority", THREE, "n2", 0) == ["n2"]
    five = power_targets("power-minority", FIVE, "n3", 0)
    assert five[0] == "n3" and len(five) == 2
    assert power_targets("power-minority", THREE, None, 2) == ["n3"]  # no leader: the drawn node


def test_every_other_power_loss_is_torn_and_the_draw_is_the_plan_s():
    assert torn_seed(12.001) == 12001 and torn_seed(12.002) is None
    planned = plan_faults(random.Random("1/faults/power"), "power", 300, 3)
    assert {fault.fault for fault in planned} == set(POWER_FAULTS)
    tears = [torn_seed(fault.at_s) is not None for fault in planned]
    assert any(tears) and not all(tears)


def test_power_and_mixed_runs_mount_lazy_filesystems_and_mixed_draws_power_faults():
    assert needs_lazy_fs("power") and needs_lazy_fs("mixed") and not needs_lazy_fs("kill")
    assert set(POWER_FAULTS) <= set(NEMESES["mixed"])


def test_a_node_that_did_not_answer_after_a_power_loss_fails_the_check():
    fine = [{"node": "n1", "answered": True, "exit": None}]
    assert check_starts_after_power_loss(fine)["valid"] is True
    refused = fine + [{"node": "n2", "answered": False, "exit": 65}]
    verdict = check_starts_after_power_loss(refused)
    assert verdict["valid"] is False and verdict["violations"] == 1
    assert verdict["counterexamples"] == [refused[1]]


def test_a_failed_power_off_makes_the_check_unknown_unless_a_node_refused():
    failed = [{"node": "n1", "answered": True, "exit": None}, {"node": "n2", "power_off_error": "boom"}]
    verdict = check_starts_after_power_loss(failed)
    assert verdict["valid"] is None and verdict["power_offs_failed"] == 1 and verdict["restarts"] == 1
    assert check_starts_after_power_loss(failed + [{"node": "n3", "answered": False, "exit": 65}])["valid"] is False


def test_the_control_counts_losses_under_each_workloads_prefix():
    from jepsen.power_control import lost_counts

    summary = {"properties": {
        "timers/no_lost_timers": {"valid": False, "violations": 120},
        "queue/no_lost_acknowledged_pushes": {"valid": True, "violations": 0},
        "txn/no_lost_acknowledged_pushes": {"valid": False, "violations": 7},
        "txn/transaction_atomicity": {"valid": False, "violations": 3},
        "txn/replicas_agree": {"valid": False, "violations": 1},  # not a loss property
    }}
    assert lost_counts(summary) == {"timers/no_lost_timers": 120, "txn/no_lost_acknowledged_pushes": 7,
                                    "txn/transaction_atomicity": 3}
