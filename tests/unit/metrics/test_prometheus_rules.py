"""infra/prometheus/humpyard-rules.yml: parses, names its alerts, uses real metrics."""

from __future__ import annotations

import re
from pathlib import Path

import yaml  # noqa: E402

from humpyard.metrics import GatewayMetrics, Metrics

RULES = Path(__file__).resolve().parents[3] / "infra" / "prometheus" / "humpyard-rules.yml"


def load_rules() -> list[dict[str, object]]:
    data = yaml.safe_load(RULES.read_text())
    return [r for group in data["groups"] for r in group["rules"]]


def test_the_three_alerts_are_defined_with_annotations() -> None:
    rules = {r["alert"]: r for r in load_rules()}
    assert {"HumpyardOverrideLong", "HumpyardHighFailureRate",
            "HumpyardFallbackBlocked"} <= set(rules)
    for rule in rules.values():
        assert rule["expr"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    long_ = rules["HumpyardOverrideLong"]
    assert long_["for"] == "5m"
    assert re.fullmatch(r"humpyard_override_oldest_age_seconds > 6 \* 3600",
                        long_["expr"].strip())
    assert "[10m]" in rules["HumpyardHighFailureRate"]["expr"]
    assert "0.2" in rules["HumpyardHighFailureRate"]["expr"]


def test_the_ledger_alerts_fire_on_a_lagging_or_losing_writer() -> None:
    rules = {r["alert"]: r for r in load_rules()}
    lag = rules["HumpyardLedgerLagging"]
    assert re.fullmatch(r"humpyard_ledger_lag_seconds > 5", lag["expr"].strip())
    assert lag["for"] == "30s" and lag["labels"]["severity"] == "critical"
    lost = rules["HumpyardLedgerLost"]["expr"]
    assert "increase(humpyard_ledger_lost_total[5m])" in lost and lost.strip().endswith("> 0")


def test_every_metric_used_is_declared_by_gateway_metrics() -> None:
    gm = GatewayMetrics(Metrics())
    declared = gm.names()
    histograms = {m.name for m in gm.metrics.collect() if m.kind == "histogram"}
    used: set[str] = set()
    for rule in load_rules():
        used |= set(re.findall(r"\bhumpyard_[a-z_]+", str(rule["expr"])))
    assert used
    for name in used:
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or base in histograms, name
