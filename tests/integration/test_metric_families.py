"""The metric families a real node exports (its GET /metrics) against what the repository says of
them: docs/spec.md section 5 lists exactly those families, `promtool check metrics` finds nothing
against Prometheus's naming conventions, and every expression of the Grafana dashboard
(deploy/grafana/queen-raft.json) names only series of those families and parses as PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cluster_fixture import running_cluster, token

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "docs" / "spec.md"
GRAFANA = REPO / "deploy" / "grafana" / "queen-raft.json"
# Series a dashboard may name that Prometheus itself makes for every target.
PROMETHEUS_SERIES = {"up"}
# The series each type of family exports in the text format (prometheus_client adds `_created`).
SUFFIXES = {"counter": ("", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created")}
# Which panel covers each view the /dashboard page has (title words, lower case).
# A tick fires a timer due in 300 ms well within this, on a loaded machine too.
FIRE_WAIT_S = 15.0
FIRED_BY_QUEUE = 'queen_timers_fired_by_queue_total{queue="families",tenant="acme"} 1.0'
VIEWS = ("leader", "term", "commit lag", "fire lag", "fires / s", "pending", "dlq", "http latency", "journal flush")


@pytest.fixture(scope="module")
def metrics_text(tmp_path_factory) -> str:
    """A one-node cluster's /metrics after a few calls, so the node-local families have samples:
    one timer pending, one due at once (it fires in its own entry), one fired by a tick."""
    with running_cluster(tmp_path_factory.mktemp("metrics"), node_count=1) as cluster:
        ops = [{"op": "schedule", "queue": "families", "timerKey": f"k{i}", "delayMs": delay,
                "txn": f"families-{i}", "payload": "e30="} for i, delay in enumerate((60_000, 0, 300))]
        status, _, body = cluster.call("n1", "POST", "/api/v1/timers", token("acme", "read-write"), {"operations": ops})
        assert status == 200, body
        deadline = time.monotonic() + FIRE_WAIT_S
        while True:
            status, _, text = cluster.call("n1", "GET", "/metrics")
            assert status == 200
            if FIRED_BY_QUEUE in text or time.monotonic() > deadline:
                return text
            time.sleep(0.05)


def exported_families(text: str) -> dict[str, str]:
    """{family: type} from the `# TYPE` lines; the `_created` gauges prometheus_client writes for
    a counter or histogram belong to that family."""
    declared = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    return {name: kind for name, kind in declared.items()
            if not (name.endswith("_created") and kind == "gauge"
                    and (name.removesuffix("_created") in declared
                         or name.removesuffix("_created") + "_total" in declared))}


def series_names(families: dict[str, str]) -> set[str]:
    names = set(PROMETHEUS_SERIES)
    for name, kind in families.items():
        base = name.removesuffix("_total") if kind == "counter" else name
        names |= {name} | {base + suffix for suffix in SUFFIXES[kind] if suffix}
    return names


def spec_families() -> set[str]:
    text = SPEC.read_text()
    section = text[text.index("## 5. Observability"):text.index("## 6.")]
    return set(re.findall(r"`(queen_[a-z0-9_]+)[{`]", section))


def grafana_queries(node) -> list[str]:
    """Every PromQL text of the dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        if node.get("type") == "query" and isinstance(node.get("definition"), str):
            found.append(node["definition"])
        return found + [q for key, value in node.items() if key != "expr" for q in grafana_queries(value)]
    if isinstance(node, list):
        return [q for item in node for q in grafana_queries(item)]
    return []


def named_series(promql: str) -> set[str]:
    """The metric names of a PromQL text: identifiers outside quotes, label matchers and range
    brackets that are not functions, keywords or grouping labels."""
    grafana_label_values = re.fullmatch(r"label_values\((\w+)\s*,\s*\w+\)", promql.strip())
    if grafana_label_values:  # Grafana's own query of a template variable: (metric, label)
        return {grafana_label_values.group(1)}
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', promql)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    words = re.findall(r"(?<![\w:.])[A-Za-z_:][\w:]*(?![\w:]|\s*\()", text)
    keywords = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
    return {word for word in words if word not in keywords}


def test_the_spec_lists_every_family_a_node_exports_and_no_other(metrics_text):
    exported = set(exported_families(metrics_text))
    listed = spec_families()
    assert exported == listed, (f"exported, not in docs/spec.md section 5: {sorted(exported - listed)}; "
                                f"listed, not exported: {sorted(listed - exported)}")


def test_the_leader_counts_the_fires_of_its_ticks_by_queue(metrics_text):
    assert FIRED_BY_QUEUE in metrics_text, [line for line in metrics_text.splitlines() if "by_queue" in line]
    assert 'queen_timers_fired_total{result="appended",tenant="acme"} 2.0' in metrics_text


def test_promtool_finds_no_naming_problem_in_a_nodes_metrics(metrics_text):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (.ci/run does it)"
    checked = subprocess.run([promtool, "check", "metrics"], input=metrics_text, capture_output=True, text=True,
                             timeout=30)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), checked.stdout + checked.stderr


def test_every_grafana_expression_names_only_exported_series(metrics_text):
    dashboard = json.loads(GRAFANA.read_text())
    queries = grafana_queries(dashboard)
    assert len(queries) >= 15, queries
    allowed = series_names(exported_families(metrics_text))
    for query in queries:
        names = named_series(query)
        assert names, f"no metric in {query!r}"
        assert names <= allowed, f"{query!r} names {sorted(names - allowed)}, which no node exports"


def test_the_grafana_dashboard_has_the_pages_views_and_its_promql_parses(tmp_path):
    dashboard = json.loads(GRAFANA.read_text())
    titles = " | ".join(panel["title"].lower() for panel in dashboard["panels"])
    assert [view for view in VIEWS if view not in titles] == [], titles
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (.ci/run does it)"
    # Each expression as a recording rule (JSON is YAML): promtool parses every one.
    exprs = [q.replace("$tenant", ".*") for q in grafana_queries(dashboard) if not q.startswith("label_values(")]
    rules = tmp_path / "grafana-exprs.rules.yml"
    rules.write_text(json.dumps({"groups": [{"name": "grafana", "rules": [
        {"record": f"grafana:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(exprs)} rules found" in checked.stdout, checked.stdout


def test_the_expression_reader_finds_metric_names_only():
    query = ('histogram_quantile(0.99, sum by (tenant, le) (rate(queen_a_bucket{tenant=~"x|queen_b"}[1m]))) '
             '- on (tenant) group_right max by (tenant) (queen_c) > bool 0 offset 5m')
    assert named_series(query) == {"queen_a_bucket", "queen_c"}
    assert named_series("label_values(queen_raft_term, tenant)") == {"queen_raft_term"}
