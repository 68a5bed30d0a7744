"""The node process's GIL switch interval (queen_raft/node.py): after every journal flush
(fdatasync releases the GIL) the tick thread takes the GIL back from the loop thread within it."""

from __future__ import annotations

import sys

import pytest

from queen_raft.node import GIL_SWITCH_INTERVAL_S, configure_gil_switch_interval

CPYTHON_DEFAULT_SWITCH_INTERVAL_S = 0.005


@pytest.fixture
def restored_switch_interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_node_shortens_the_switch_interval_below_cpythons_default(restored_switch_interval):
    sys.setswitchinterval(CPYTHON_DEFAULT_SWITCH_INTERVAL_S)
    configure_gil_switch_interval()
    assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL_S)
    assert GIL_SWITCH_INTERVAL_S < CPYTHON_DEFAULT_SWITCH_INTERVAL_S
