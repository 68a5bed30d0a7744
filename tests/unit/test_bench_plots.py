"""The bench plots tell every line apart: each system its own colour, a variant its system's, dashed."""

from bench.plots import style
from bench.systems import SYSTEM_NAMES


def test_every_system_has_its_own_colour():
    colours = [style(name)["color"] for name in SYSTEM_NAMES]
    assert None not in colours and len(set(colours)) == len(colours), dict(zip(SYSTEM_NAMES, colours))


def test_a_variant_keeps_its_systems_colour_and_is_dashed():
    assert style("queen-raft (timer_fire_batch=2048)") == {"color": style("queen-raft")["color"], "linestyle": "--"}
    assert style("queen-raft")["linestyle"] == "-"


def test_the_drain_plot_zooms_past_a_system_far_slower_than_the_quickest(tmp_path, monkeypatch):
    import bench.plots as plots

    panels = []
    real_subplots = plots.plt.subplots

    def subplots(rows, columns, **kwargs):
        panels.append(columns)
        return real_subplots(rows, columns, **kwargs)

    monkeypatch.setattr(plots.plt, "subplots", subplots)
    line = lambda slope: [(i, i * slope) for i in range(0, 1001, 100)]  # noqa: E731
    plots.drain_lag_curve({"queen-raft": line(0.004), "redis": line(0.005)}, 1000, tmp_path / "near.png")
    plots.drain_lag_curve({"queen-raft": line(0.004), "etcd": line(0.34)}, 1000, tmp_path / "far.png")
    assert panels == [1, 2]
    assert (tmp_path / "near.png").stat().st_size > 0 and (tmp_path / "far.png").stat().st_size > 0
