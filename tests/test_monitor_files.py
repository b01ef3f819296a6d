"""The monitor's own Prometheus metrics, and the alert rules and Grafana dashboard that read them
(``monitoring/``), checked against the real text format (promtool and Grafana are not on this machine):
the monitor's exposition (``prometheus_client``'s own output after a scripted session with an alarm)
is parsed with ``prometheus_client``'s parser; every expression of the rules file (YAML, safe loader)
and of the dashboard (every target, template query and annotation) must name only metrics and labels
that exposition has (plus the target labels Prometheus adds, ``instance`` and ``job``). The checker is
shown to catch a misspelt metric and a misspelt label."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "monitoring" / "eagle3-monitor.rules.yml"
DASHBOARD = ROOT / "monitoring" / "eagle3-monitor.dashboard.json"
TARGET_LABELS = {"instance", "job"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
            "inf", "nan"}


@pytest.fixture(scope="module")
def exposition():
    """(metric sample names, label names) of the monitor's exposition after a session with an alarm."""
    from prometheus_client.parser import text_string_to_metric_families
    from test_monitor import INFO, Script, _canary, baseline_doc

    from eagle3_conformance.monitor.exposition import Exposition
    from eagle3_conformance.monitor.session import Monitor, Options

    expo = Exposition()
    canary, _ = _canary("DROPPED")
    s = Script(lambda t: 1.53 if t < 1200 else 1.05)
    Monitor(Options("http://x", "b.json", duration=2400, window_s=30, interval_s=5, warmup=5), INFO, baseline_doc(),
            scrape=s.scrape, clock=s.clock, sleep=s.sleep, canary=canary, expo=expo,
            diagnose=lambda: {"diagnoses": [{"title": "slot 0 is B_0", "fix": ["write [1, 14, 26]"]}]}).run()
    text = expo.text()
    names, labels = set(), set(TARGET_LABELS)
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            names.add(smp.name)
            labels.update(smp.labels)
    return names, labels, text


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression reads. Strings are dropped, ``{...}`` matchers give
    their label names, ``by`` / ``without`` / ``on`` / ``ignoring`` lists give labels, range selectors
    and functions are skipped; ``label_values(metric, label)`` gives both."""
    labels: set[str] = set()
    for m, lab in re.findall(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*(\w+)\s*\)", expr):
        labels.add(lab)
        expr = expr.replace(f"label_values({m}, {lab})", m)
    for block in re.findall(r"\{([^}]*)\}", expr):
        labels.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", block))
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    for _kw, block in re.findall(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels.update(x.strip() for x in block.split(",") if x.strip())
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r'"[^"]*"', " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\$\w+", " ", expr)
    names = {t for t in re.findall(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", expr)
             if t.lower() not in KEYWORDS}
    return names, labels


def rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text())
    out = []
    for g in doc["groups"]:
        for r in g["rules"]:
            out.append((r["alert"], str(r["expr"])))
            for text in (r.get("annotations") or {}).values():
                out.extend((f"{r['alert']} annotation", q) for q in re.findall(r'query "([^"]+)"', text))
    return out


def dashboard_exprs() -> list[tuple[str, str]]:
    d = json.loads(DASHBOARD.read_text())
    out = [(f"panel {p['title']}", t["expr"]) for p in d["panels"] for t in p.get("targets", [])]
    out += [(f"variable {v['name']}", v["definition"]) for v in d["templating"]["list"] if v.get("definition")]
    out += [(f"annotation {a['name']}", a["expr"]) for a in d["annotations"]["list"] if a.get("expr")]
    return out


def problems(exprs, exposition) -> list[str]:
    names, labels, _ = exposition
    out = []
    for where, e in exprs:
        n, lab = promql_names(e)
        out += [f"{where}: metric {x} is not in the monitor's exposition" for x in sorted(n - names)]
        out += [f"{where}: label {x} is not in the monitor's exposition" for x in sorted(lab - labels)]
    return out


def test_the_exposition_has_every_series_the_issue_names(exposition):
    names, labels, text = exposition
    for n in ("eagle3_monitor_window_acceptance", "eagle3_monitor_drift_statistic", "eagle3_monitor_alarm",
              "eagle3_monitor_canary_verdict", "eagle3_monitor_expected_detection_seconds",
              "eagle3_monitor_diagnosis_info"):
        assert n in names, n
    assert 'eagle3_monitor_canary_verdict{eagle3_monitor_canary_verdict="dropped"} 1.0' in text
    assert "eagle3_monitor_alarm 1.0" in text and 'fix="write [1, 14, 26]"' in text


def test_every_alert_rule_reads_the_monitors_metrics(exposition):
    exprs = rule_exprs()
    assert len(exprs) >= 6
    assert problems(exprs, exposition) == []


def test_every_dashboard_query_reads_the_monitors_metrics(exposition):
    exprs = dashboard_exprs()
    assert len(exprs) >= 12
    assert problems(exprs, exposition) == []


def test_the_checker_catches_a_misspelt_metric_and_label(exposition):
    bad = [("x", "max by (instance, figures) (eagle3_monitor_drift_statistc / eagle3_monitor_drift_threshold)")]
    assert problems(bad, exposition) == [
        "x: metric eagle3_monitor_drift_statistc is not in the monitor's exposition",
        "x: label figures is not in the monitor's exposition"]
