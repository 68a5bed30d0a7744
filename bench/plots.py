"""PNG figures (matplotlib, Agg backend: no display on this machine)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench.report import SHARED_CORES_NOTE  # noqa: E402

# A scatter of more points than this is a blot: keep every n-th sample (the JSON keeps the
# summaries of all of them).
MAX_POINTS_PER_SERIES = 4000
COLORS = {"queen-raft": "tab:blue", "etcd": "tab:purple", "redis": "tab:red", "postgres": "tab:green"}


def style(system: str) -> dict:
    """A system's colour; a variant of it ("queen-raft (timer_fire_batch=2048)") keeps the colour
    of its system, dashed, so every line of a plot can be told apart."""
    base = system.split(" (", 1)[0]
    return {"color": COLORS.get(base), "linestyle": "--" if base != system else "-"}


def thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    step = max(1, len(points) // MAX_POINTS_PER_SERIES)
    return points[::step]


def fire_lag_over_time(series: dict[int, dict[str, list[tuple[float, float]]]], path: Path) -> None:
    """series[rate][system] = [(seconds since the run began, end-to-end lag ms)]."""
    rates = sorted(series)
    figure, axes = plt.subplots(len(rates), 1, figsize=(10, 3.2 * len(rates)), squeeze=False)
    for axis, rate in zip(axes[:, 0], rates):
        for system, points in series[rate].items():
            if not points:
                continue
            xs, ys = zip(*thin(points))
            axis.scatter(xs, ys, s=2, alpha=0.5, color=style(system)["color"], label=system)
        axis.set_title(f"{rate:,} timers/s: end-to-end fire lag (consumer receipt - deliverAt)")
        axis.set_xlabel("deliverAt, s since the run began")
        axis.set_ylabel("lag, ms")
        axis.set_yscale("symlog", linthresh=10)
        axis.grid(True, alpha=0.3)
        axis.legend(loc="upper right", markerscale=4)
    figure.suptitle(f"Fire lag over time ({SHARED_CORES_NOTE})", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


# The second panel of the drain plot leaves out a system whose last fire lagged more than this
# many times the quickest one's: one slow system (etcd's minutes) flattens the others' lines.
ZOOM_OUTLIER_FACTOR = 5.0


def drain_lag_curve(series: dict[str, list[tuple[float, float]]], count: int, path: Path) -> None:
    """series[system] = [(fires so far, fire instant - deliverAt in s)]: must be a straight line.
    Left every system; right, zoomed, those within ZOOM_OUTLIER_FACTOR of the quickest."""
    drawn = {system: points for system, points in series.items() if points}
    last = {system: points[-1][1] for system, points in drawn.items()}
    quickest = min((lag for lag in last.values() if lag > 0), default=0.0)
    zoomed = {s: p for s, p in drawn.items() if quickest <= 0 or last[s] <= ZOOM_OUTLIER_FACTOR * quickest}
    panels = [drawn, zoomed] if len(zoomed) < len(drawn) else [drawn]
    figure, axes = plt.subplots(1, len(panels), figsize=(10 if len(panels) == 1 else 15, 5), squeeze=False)
    for axis, shown in zip(axes[0], panels):
        for system, points in shown.items():
            xs, ys = zip(*thin(points))
            axis.plot(xs, ys, label=system, linewidth=1.5, **style(system))
        axis.set_xlabel("timers fired")
        axis.set_ylabel("fire instant - deliverAt, s")
        axis.grid(True, alpha=0.3)
        axis.legend()
    if len(panels) > 1:
        axes[0][1].set_title(f"without the systems over {ZOOM_OUTLIER_FACTOR:g}x the quickest's last lag", fontsize=10)
    figure.suptitle(f"{count:,} timers due at one instant: lag of each fire during the drain")
    figure.text(0.01, 0.01, SHARED_CORES_NOTE, fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
