"""The alert rules (deploy/prometheus/rules.yml) against their runbooks, their unit tests, the metric
inventory (docs/operations/metrics.md) and the scrape configuration. promtool itself checks the
syntax and runs rules.test.yml (``make check-alerts``); these tests check what promtool cannot."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RUNBOOKS = ROOT / "docs" / "runbooks"
INVENTORY = ROOT / "docs" / "operations" / "metrics.md"
SEVERITIES = {"P0", "P1", "P2"}
# Series Prometheus makes itself, and the parts of an expression that are not metric names.
SYNTHETIC = {"up"}
PROMQL_WORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "group_left"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load((PROMETHEUS / "rules.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label
    lists, label matchers, strings, durations or numbers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\boffset\s+\w+", "", text)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", text))
    return {n for n in names if n not in PROMQL_WORDS and not re.fullmatch(r"\d+\w*", n)}


def inventory() -> set[str]:
    """Every exported name of the inventory table, histograms with their three series."""
    names: set[str] = set()
    for name, kind in re.findall(r"^\| `([a-z_:][a-z0-9_:]*)` \| (\w+) \|", INVENTORY.read_text(), re.M):
        names.add(name)
        if kind == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
    return names


def test_metric_names_parser_finds_names_and_nothing_else() -> None:
    """The parser keeps metric names and drops functions, keywords, label lists and matchers (so
    the inventory test below can fail on a real unknown name)."""
    expr = (
        'sum by (le, provider) (rate(webhook_x_bucket{outcome="a"}[5m] offset 1d)) > 0.2'
        " unless on (business_date) max(recon_y) and absent(z_total)"
    )
    assert metric_names(expr) == {"webhook_x_bucket", "recon_y", "z_total"}


def test_every_rule_has_a_severity_annotations_and_its_runbook() -> None:
    """Each rule is P0, P1 or P2, has a summary, a description and a runbook_url naming
    docs/runbooks/<alert>.md, and that file exists."""
    for rule in _rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in SEVERITIES, name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/runbooks/{name}.md", name
        assert (RUNBOOKS / f"{name}.md").is_file(), name


def test_every_runbook_belongs_to_a_rule_and_has_its_sections() -> None:
    """No runbook without a rule (a renamed alert leaves none behind), and each says what the alert
    means, whether money is at risk, what to check first and what never to do."""
    names = {rule["alert"] for rule in _rules()}
    pages = {page.stem for page in RUNBOOKS.glob("*.md")}
    assert pages == names
    for page in RUNBOOKS.glob("*.md"):
        text = page.read_text()
        for section in ("**What it means.**", "**Money at risk?**", "## First checks", "## Never"):
            assert section in text, (page.name, section)


def test_every_metric_a_rule_reads_is_exported_by_some_process() -> None:
    """A rule over a metric nobody exports never fires: every name in every expression is in the
    inventory (or is Prometheus's own ``up``)."""
    exported = inventory() | SYNTHETIC
    assert len(exported) > 50
    for rule in _rules():
        unknown = metric_names(rule["expr"]) - exported
        assert not unknown, (rule["alert"], unknown)


def test_every_p0_has_a_unit_test_that_fires_and_one_that_stays_silent() -> None:
    """rules.test.yml evaluates each P0 at least once expecting it to fire and once expecting
    silence (promtool runs them; this checks none is missing)."""
    tests = yaml.safe_load((PROMETHEUS / "rules.test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for rule in _rules():
        if rule["labels"]["severity"] != "P0":
            continue
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), rule["alert"]
        assert any(not case["exp_alerts"] for case in mine), rule["alert"]


def test_the_scrape_config_has_every_process_with_a_port() -> None:
    """deploy/prometheus/prometheus.yml scrapes each process type of deploy/processes.toml at its
    port (the job name is the process type, which the P1 rules use), and nothing else."""
    catalogue = tomllib.loads((ROOT / "deploy" / "processes.toml").read_text())["process"]
    expected = {p["name"]: f"127.0.0.1:{p['port']}" for p in catalogue if p.get("port")}
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job["static_configs"][0]["targets"][0] for job in config["scrape_configs"]}
    assert jobs == expected
    assert config["rule_files"] == ["rules.yml"]


def test_the_dashboard_reads_only_exported_metrics() -> None:
    """deploy/grafana/pipeline.json is valid JSON with unique panel ids, and every query's metric is
    in the inventory (a renamed metric would leave an empty panel)."""
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "pipeline.json").read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    exported = inventory() | SYNTHETIC
    for panel in panels:
        for target in panel["targets"]:
            assert not metric_names(target["expr"]) - exported, (panel["title"], target["expr"])
    wanted = (
        "Deposits",
        "success rate",
        "MT5 credits",
        "Outbox backlog",
        "Consumer lag",
        "UNKNOWN",
        "reconciliation cases",
    )
    titles = " ".join(panel["title"] for panel in panels)
    assert all(word in titles for word in wanted)
