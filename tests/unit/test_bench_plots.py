"""The bench plots tell every line apart: each system its own colour, a variant its system's, dashed."""

from bench.plots import style
from bench.systems import SYSTEM_NAMES


def test_every_system_has_its_own_colour():
    colours = [style(name)["color"] for name in SYSTEM_NAMES]
    assert None not in colours and len(set(colours)) == len(colours), dict(zip(SYSTEM_NAMES, colours))


def test_a_variant_keeps_its_systems_colour_and_is_dashed():
    assert style("queen-raft (timer_fire_batch=2048)") == {"color": style("queen-raft")["color"], "linestyle": "--"}
    assert style("queen-raft")["linestyle"] == "-"
