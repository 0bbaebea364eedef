"""CloudWatch EMF records: structure, the service dimension, counter deltas."""

from __future__ import annotations

import json
from typing import Any

from humpyard.metrics import GatewayMetrics, Metrics, emf


def check_structure(doc: dict[str, Any], namespace: str = "Humpyard") -> None:
    json.dumps(doc, allow_nan=False)  # one valid JSON log line
    aws = doc["_aws"]
    assert set(aws) == {"Timestamp", "CloudWatchMetrics"}
    assert isinstance(aws["Timestamp"], int)
    (directive,) = aws["CloudWatchMetrics"]
    assert set(directive) == {"Namespace", "Dimensions", "Metrics"}
    assert directive["Namespace"] == namespace
    (dims,) = directive["Dimensions"]
    assert dims[0] == "service"
    for d in dims:
        assert isinstance(doc[d], str) and doc[d]
    assert 1 <= len(directive["Metrics"]) <= 100
    for metric in directive["Metrics"]:
        assert set(metric) == {"Name", "Unit"}
        value = doc[metric["Name"]]
        assert isinstance(value, int | float) or (
            isinstance(value, list) and 1 <= len(value) <= 100)


def emf_records(m: Metrics, namespace: str = "Humpyard", service: str = "humpyard",
                timestamp_ms: int = 0) -> list[dict[str, Any]]:
    return emf.records(m.collect(), namespace=namespace, service=service,
                       timestamp_ms=timestamp_ms)


def by_metric(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in docs if name in d]


def test_document_structure_and_service_dimension() -> None:
    gm = GatewayMetrics(Metrics())
    gm.requests.inc(route="auto", target="fast", status="200")
    gm.health_skips.inc(route="auto", target="fast")
    gm.request_duration.observe(0.4, route="auto")
    gm.override_oldest_age.set(7200)
    gm.budget_spend_usd.set(1.25, key="ci")
    docs = emf_records(gm.metrics, namespace="Test", service="gw-prod",
                       timestamp_ms=1_800_000_000_250)
    for doc in docs:
        check_structure(doc, "Test")
        assert doc["_aws"]["Timestamp"] == 1_800_000_000_250
        assert doc["service"] == "gw-prod"
    (req,) = by_metric(docs, "humpyard_requests_total")
    assert req["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["service", "route", "target", "status"]]
    assert req["_aws"]["CloudWatchMetrics"][0]["Metrics"] == [
        {"Name": "humpyard_requests_total", "Unit": "Count"}]
    assert (req["route"], req["target"], req["status"], req["humpyard_requests_total"]) == (
        "auto", "fast", "200", 1)
    # The alarm on overrides relies on exactly this dimension set.
    (age,) = by_metric(docs, "humpyard_override_oldest_age_seconds")
    assert age["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert age["humpyard_override_oldest_age_seconds"] == 7200
    assert age["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] == "Seconds"
    (dur,) = by_metric(docs, "humpyard_request_duration_seconds")
    assert dur["humpyard_request_duration_seconds"] == 0.4
    (spend,) = by_metric(docs, "humpyard_budget_spend_usd")
    assert spend["key"] == "ci"


def test_counters_are_deltas_since_the_previous_call() -> None:
    m = Metrics()
    c = m.counter("t_total", "help", ("route",))
    c.inc(3, route="a")
    c.inc(route="b")
    first = {d["route"]: d["t_total"] for d in emf_records(m)}
    assert first == {"a": 3, "b": 1}
    c.inc(2, route="a")
    second = {d["route"]: d["t_total"] for d in emf_records(m)}
    assert second == {"a": 2}  # b did not move: left out
    assert emf_records(m) == []
    assert c.value(route="a") == 5  # the Prometheus total is untouched


def test_gauges_repeat_and_histograms_send_new_values_only() -> None:
    m = Metrics()
    g = m.gauge("t_level", "help")
    h = m.histogram("t_seconds", "help", ("route",), (1,))
    g.set(4)
    h.observe(0.5, route="a")
    h.observe(2.0, route="a")
    docs = emf_records(m)
    assert [d["t_level"] for d in by_metric(docs, "t_level")] == [4]
    assert [d["t_seconds"] for d in by_metric(docs, "t_seconds")] == [[0.5, 2.0]]
    docs = emf_records(m)
    assert [d["t_level"] for d in by_metric(docs, "t_level")] == [4]
    assert by_metric(docs, "t_seconds") == []
    for i in range(250):
        h.observe(i / 100, route="a")
    (doc,) = by_metric(emf_records(m), "t_seconds")
    check_structure(doc)
    values = doc["t_seconds"]
    assert len(values) == 100 and set(values) <= {i / 100 for i in range(250)}


def test_metrics_with_the_same_labels_share_a_record_and_empty_values_are_dashed() -> None:
    m = Metrics()
    m.counter("a_total", "help", ("route",)).inc(route="r")
    m.counter("b_total", "help", ("route",)).inc(2, route="r")
    m.counter("c_total", "help", ("target",)).inc(target="")
    docs = emf_records(m)
    for d in docs:
        check_structure(d)
    shared = [d for d in docs if "a_total" in d]
    assert len(shared) == 1 and shared[0]["b_total"] == 2
    assert [n["Name"] for n in shared[0]["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == [
        "a_total", "b_total"]
    (c,) = by_metric(docs, "c_total")
    assert c["target"] == "-"


def test_more_than_100_metrics_are_split_across_records() -> None:
    m = Metrics()
    for i in range(130):
        m.gauge(f"g{i}", "help").set(i)
    docs = emf_records(m)
    assert [len(d["_aws"]["CloudWatchMetrics"][0]["Metrics"]) for d in docs] == [100, 30]
    for d in docs:
        check_structure(d)


def test_histogram_values_carry_four_significant_digits() -> None:
    # Every digit is a log byte billed (docs/deploy.md, "What it costs"); counters and
    # gauges are exact.
    m = Metrics()
    h = m.histogram("t_seconds", "t", ("route",), (1.0,))
    c = m.counter("t_total", "t")
    g = m.gauge("t_usd", "t")
    for v in (0.007228036000014981, 12.345678, 0.5):
        h.observe(v, route="a")
    c.inc(1234567)
    g.set(123.456789)
    docs = emf_records(m)
    assert [d["t_seconds"] for d in by_metric(docs, "t_seconds")] == [[0.007228, 12.35, 0.5]]
    assert [d["t_total"] for d in by_metric(docs, "t_total")] == [1234567]
    assert [d["t_usd"] for d in by_metric(docs, "t_usd")] == [123.456789]
