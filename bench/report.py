"""Results: one JSON per scenario run in bench/results/<date>-<scenario>.json, and the markdown table
of every scenario of that date, each figure as ours / etcd / Redis / PostgreSQL."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = RESULTS_DIR.parents[1]
# Next to every figure: nothing here had a core of its own.
SHARED_CORES_NOTE = "2 cores shared by the servers and the load generator"
SYSTEM_ORDER = ("queen-raft", "etcd", "redis", "postgres")
SCENARIO_ORDER = ("schedule_throughput", "fire_lag", "due_million", "failover", "recovery", "queue_throughput",
                  "timer_memory", "ten_million")


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with open("/proc/meminfo") as meminfo:
        mem_kib = int(next(line.split()[1] for line in meminfo if line.startswith("MemTotal")))
    return {"commit": source_commit(), "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(),
            "load_average_now": os.getloadavg()}


def source_commit() -> str | None:
    """The commit measured: QUEEN_BENCH_COMMIT when the suite runs from an exported tree (a shared
    work tree may be mid-edit), else the work tree's HEAD (with "+dirty" when it has changes)."""
    if os.environ.get("QUEEN_BENCH_COMMIT"):
        return os.environ["QUEEN_BENCH_COMMIT"]
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "queen_raft"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


@dataclass
class Figure:
    name: str
    unit: str
    values: dict[str, object] = field(default_factory=dict)
    target: str = ""

    def as_dict(self) -> dict:
        return {"figure": self.name, "unit": self.unit, "values": self.values, "target": self.target}


@dataclass
class ScenarioResult:
    scenario: str
    quick: bool
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)  # per system: everything measured
    plots: list[str] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    # Other processes may share the cores: the 1-minute load average says how much.
    load_average_at_start: tuple = field(default_factory=os.getloadavg)

    def figure(self, name: str, unit: str, target: str = "") -> Figure:
        for existing in self.figures:
            if existing.name == name:
                return existing
        made = Figure(name, unit, target=target)
        self.figures.append(made)
        return made

    def as_dict(self) -> dict:
        return {"scenario": self.scenario, "quick": self.quick, "started_at": self.started_at,
                "load_average_at_start": self.load_average_at_start, "machine": machine(), "note": SHARED_CORES_NOTE,
                "figures": [f.as_dict() for f in self.figures], "details": self.details, "plots": self.plots}


def format_value(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:,.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def repo_relative(path: Path) -> Path:
    """The path as the repository names it: results and logs must not carry this machine's paths."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT)
    except ValueError:
        return Path(path)


def results_dir(quick: bool) -> Path:
    """--quick runs are for development: they go to results/tmp/ (git-ignored), not beside the real ones."""
    return RESULTS_DIR / "tmp" if quick else RESULTS_DIR


def result_path(scenario: str, quick: bool, date: str | None = None) -> Path:
    return results_dir(quick) / f"{date or today()}-{scenario}.json"


def write_result(result: ScenarioResult) -> Path:
    results_dir(result.quick).mkdir(parents=True, exist_ok=True)
    path = result_path(result.scenario, result.quick)
    path.write_text(json.dumps(result.as_dict(), indent=1, default=str) + "\n")
    return path


def table_rows(result: dict) -> list[str]:
    rows = []
    for figure in result["figures"]:
        values = figure["values"]
        cell = " / ".join(format_value(values.get(system)) for system in SYSTEM_ORDER)
        unit = f" {figure['unit']}" if figure["unit"] else ""
        rows.append(f"| {result['scenario']} | {figure['figure']}{unit} | {cell} | {figure['target'] or ''} | "
                    f"{SHARED_CORES_NOTE} |")
    return rows


TABLE_HEADER = [
    "| scenario | figure | ours / etcd / Redis / PostgreSQL | target | measured on |",
    "| --- | --- | --- | --- | --- |",
]


def markdown_table(results: list[dict]) -> str:
    lines = list(TABLE_HEADER)
    for result in results:
        lines += table_rows(result)
    return "\n".join(lines) + "\n"


def write_table(quick: bool, date: str | None = None) -> Path:
    """The table of every scenario of this date (the latest run of each)."""
    date = date or today()
    results = []
    for scenario in SCENARIO_ORDER:
        path = result_path(scenario, quick, date)
        if path.exists():
            results.append(json.loads(path.read_text()))
    out = results_dir(quick) / f"{date}-table.md"
    head = results[0]["machine"] if results else machine()
    out.write_text(
        f"# Benchmark results {date}{' (--quick sizes)' if quick else ''}\n\n"
        f"Machine: {head['cpus']} cores ({head['cpu_model']}), {head['memory_gib']} GiB, Linux {head['kernel']}, "
        f"Python {head['python']}. Every figure: {SHARED_CORES_NOTE}, and with whatever else ran on the "
        "machine (the load averages below say how busy it was). Ours is three nodes replicating every write to a majority, and so "
        "is etcd (three members); Redis and PostgreSQL are single-node and unreplicated. Command: `make bench` (or `python -m bench <scenario>`).\n\n" + markdown_table(results)
        + "\nLoad average (1 min) of the machine when each scenario started (2 cores; above 2 means others "
        "were queueing for them too): "
        + ", ".join(f"{r['scenario']} {r.get('load_average_at_start', [None])[0]:.1f}" for r in results
                    if r.get("load_average_at_start")) + ".\n"
        + (f"\nCommit measured: {head.get('commit')}.\n" if head.get("commit") else ""))
    return out
