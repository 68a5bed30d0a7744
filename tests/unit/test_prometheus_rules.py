"""deploy/prometheus/: the rules load, promtool's unit tests fire every alert on its input series
(and not on the series that must not fire it), and every metric the rules name is one a node
exports. Needs Debian's `prometheus` package for promtool (.ci/run installs it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from queen_raft.api.metrics import ApiMetrics
from test_api_fake_group import make_serving

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "queen-raft.rules.yml"


def promtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: apt-get install prometheus (.ci/run does it)"
    return subprocess.run([binary, *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60)


def test_the_rules_and_the_scrape_config_are_valid():
    for args in (("check", "rules", RULES.name), ("check", "config", "scrape.yml")):
        done = promtool(*args)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_on_its_series_and_not_on_the_others():
    done = promtool("test", "rules", "rules.test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", (DEPLOY / "rules.test.yml").read_text()))
    assert alerts and alerts == tested, f"alerts without a promtool test: {alerts - tested}"


def exported_families() -> set[str]:
    serving, groups = make_serving()
    for group in groups.values():  # a real group reports its journal's flush times; the fake has no journal
        base = group.status()
        group.status = lambda base=base: {**base, "journalFlush": {
            "boundsSeconds": [0.001], "bucketCounts": [1, 0], "sumSeconds": 0.0005}}
    metrics = ApiMetrics(groups_source=lambda: groups, quotas={tenant: 1000 for tenant in groups})
    return {family.name for family in metrics.registry.collect()}


def test_every_metric_the_rules_name_is_exported_by_a_node():
    # Metric names, not the recording rules' own (level:metric:operation)
    named = set(re.findall(r"(?<![:\w])(queen_[a-z_]+)\b(?!:)", RULES.read_text()))
    families = exported_families()
    missing = {name for name in named if re.sub(r"_(bucket|total|count|sum)$", "", name) not in families}
    assert named and not missing, f"named by the rules, exported by no node: {missing}"
