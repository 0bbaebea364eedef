"""What an operator tunes through stack parameters: concurrency, throttling, tracing, alarms.

Read from the translated template deployed with given parameters
(``template_eval.Deployment``), so each check is of the value CloudFormation
would set, not of the shorthand.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from infra_support import resources, template, translated
from template_eval import Deployment, samconfig_parameters

from humpyard.aws.emission import ALARMED
from humpyard.metrics import GatewayMetrics, Metrics, emf

FUNCTIONS = ("GatewayFunction", "StreamFunction", "AdminFunction", "QuotaPollerFunction")
XRAY_POLICY = "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"


def _deployed(**parameters: str) -> Deployment:
    return Deployment(translated(parameters), parameters)


def _reserved(d: Deployment) -> dict[str, Any]:
    """ReservedConcurrentExecutions per function (parameter values are strings)."""
    return {name: props.get("ReservedConcurrentExecutions")
            for name, props in d.functions().items()}


def test_reserved_concurrency_keeps_room_for_admin_and_poller_and_can_cap_chat() -> None:
    # by default every function reserves its share: 456 of a default account quota of
    # 1,000, leaving the 100 unreserved Lambda requires and more
    assert _reserved(_deployed()) == {"GatewayFunction": "50", "StreamFunction": "400",
                                      "AdminFunction": "5", "QuotaPollerFunction": "1"}
    capped = _deployed(StreamConcurrency="800", GatewayConcurrency="50", AdminConcurrency="3",
                       QuotaPollerConcurrency="-1")
    assert _reserved(capped) == {"GatewayFunction": "50", "StreamFunction": "800",
                                 "AdminFunction": "3", "QuotaPollerFunction": None}
    # the dev stack reserves nothing (a new account's quota of 10 allows no reservation);
    # prod keeps the template's
    dev = samconfig_parameters("default")
    assert set(_reserved(Deployment(translated(dev), dev)).values()) == {None}
    prod = samconfig_parameters("prod")
    assert _reserved(Deployment(translated(prod), prod))["AdminFunction"] == "5"


def _stage(d: Deployment) -> dict[str, Any]:
    (stage_id,) = resources(d.doc, "AWS::ApiGateway::Stage")
    return d.resolve(d.doc["Resources"][stage_id]["Properties"])  # type: ignore[no-any-return]


def test_stage_throttling_rate_and_burst_are_parameters() -> None:
    (setting,) = _stage(_deployed(ApiThrottleRate="250", ApiThrottleBurst="400"))["MethodSettings"]
    assert setting == {"ResourcePath": "/*", "HttpMethod": "*", "ThrottlingRateLimit": "250",
                       "ThrottlingBurstLimit": "400"}
    (default,) = _stage(_deployed())["MethodSettings"]
    assert (default["ThrottlingRateLimit"], default["ThrottlingBurstLimit"]) == ("1000", "2000")


@pytest.mark.parametrize("mode", ["Disabled", "Active"])
def test_the_tracing_parameter_switches_functions_api_and_code_together(mode: str) -> None:
    d = _deployed(Tracing=mode)
    on = mode == "Active"
    assert _stage(d)["TracingEnabled"] is on
    for name in FUNCTIONS:
        props = d.functions()[name]
        assert props.get("TracingConfig") == ({"Mode": "Active"} if on else None), name
        assert (XRAY_POLICY in d.managed_policies(name)) is on, name
        assert d.environment(name)["HUMPYARD_TRACING"] == ("true" if on else "false"), name


# -- ledger alarms ------------------------------------------------------------------------

# The metrics the ledger writer publishes (issue 17, item 1): lost writes by kind and
# reason, and retried transaction conflicts. When GatewayMetrics defines them, its
# definitions are what the alarms are checked against.
LEDGER_METRICS = {"humpyard_ledger_lost_total": ("kind", "reason"),
                  "humpyard_dynamodb_transaction_conflicts_total": ()}


def _emf_dimensions(name: str) -> list[str]:
    """The one dimension set EMF publishes ``name`` with, by the real renderer."""
    registry = Metrics()
    defined = {m.name: m for m in GatewayMetrics(registry).metrics.collect()}
    metric = defined.get(name) or registry.counter(name, "ledger", LEDGER_METRICS[name])
    assert tuple(metric.labelnames) == LEDGER_METRICS[name], (name, metric.labelnames)
    metric.inc(**{label: "x" for label in metric.labelnames})  # type: ignore[union-attr]
    for record in emf.records([metric], namespace="Humpyard", service="humpyard",  # type: ignore[list-item]
                              timestamp_ms=0):
        (directive,) = record["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
        (dims,) = directive["Dimensions"]
        return list(dims)
    raise AssertionError(f"{name} produced no EMF record")


def test_lost_ledger_writes_alarm_on_every_kind_and_reason() -> None:
    props = template()["Resources"]["HumpyardLedgerWritesLost"]["Properties"]
    (query,) = [m["Expression"] for m in props["Metrics"] if m.get("ReturnData")]
    words = " ".join(query.split())
    metric = "humpyard_ledger_lost_total"
    schema = f"SCHEMA(Humpyard, {', '.join(_emf_dimensions(metric))})"
    assert f"SELECT SUM({metric}) FROM {schema} WHERE service = 'humpyard'" == words
    assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["Metrics"][0]["Period"] == 60


def test_transaction_conflicts_alarm_names_the_exact_dimension_set() -> None:
    props = template()["Resources"]["HumpyardLedgerConflicts"]["Properties"]
    assert props["Namespace"] == "Humpyard"
    assert props["MetricName"] == "humpyard_dynamodb_transaction_conflicts_total"
    assert [d["Name"] for d in props["Dimensions"]] == _emf_dimensions(props["MetricName"])
    assert props["Statistic"] == "Sum" and props["Threshold"] == {"Ref":
                                                                   "LedgerConflictThreshold"}
    assert _deployed().resolve(props["Threshold"]) == "20"


def test_every_alarm_notifies_the_topic_when_one_is_given() -> None:
    topic = "arn:aws:sns:us-east-1:123456789012:oncall"
    with_topic, without = _deployed(AlarmTopicArn=topic), _deployed()
    for alarm_id in resources(template(), "AWS::CloudWatch::Alarm"):
        alarm = with_topic.doc["Resources"][alarm_id]["Properties"]
        assert with_topic.resolve(alarm)["AlarmActions"] == [topic], alarm_id
        assert "AlarmActions" not in without.resolve(alarm), alarm_id


# -- logs and metrics cadence -------------------------------------------------------------

@pytest.mark.parametrize("platform", ["WARN", "INFO"])
def test_functions_log_json_and_keep_the_emf_lines(platform: str) -> None:
    # Lambda keeps a JSON line as printed (no second encoding), so CloudWatch still
    # extracts the EMF records; a line without a "level" key (every EMF record) counts as
    # INFO, so the application level must let INFO through. The platform level drops
    # START/END/REPORT at WARN (docs/deploy.md, "What it costs").
    d = _deployed(PlatformLogLevel=platform)
    for name in FUNCTIONS:
        logging_config = d.functions()[name]["LoggingConfig"]
        assert logging_config == {"LogFormat": "JSON", "ApplicationLogLevel": "INFO",
                                  "SystemLogLevel": platform}, name
    assert "PlatformLogLevel" not in samconfig_parameters("prod")  # WARN as shipped


def _alarmed_humpyard_metrics() -> dict[str, dict[str, Any]]:
    """Every humpyard metric an alarm reads: metric name -> the alarm's properties."""
    found: dict[str, dict[str, Any]] = {}
    for alarm in resources(template(), "AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props.get("Namespace") == "Humpyard":
            found[props["MetricName"]] = props
        for query in props.get("Metrics", []):
            expression = " ".join(str(query.get("Expression", "")).split())
            for name in re.findall(r"\((humpyard_\w+)\) FROM SCHEMA\(Humpyard", expression):
                found[name] = props
    return found


def test_every_alarm_reads_a_metric_that_is_printed_when_it_moves() -> None:
    # Counters add up in each instance and print once a minute; an alarm must not wait
    # for that, nor lose what a reaped instance never printed (aws/emission.py).
    kinds = {m.name: m.kind for m in GatewayMetrics(Metrics()).metrics.collect()}
    alarmed = _alarmed_humpyard_metrics()
    assert {"humpyard_override_oldest_age_seconds", "humpyard_fallback_blocked_total",
            "humpyard_ledger_lost_total",
            "humpyard_dynamodb_transaction_conflicts_total"} == set(alarmed)
    for name, props in alarmed.items():
        assert kinds[name] in ("counter", "gauge"), name
        if kinds[name] == "counter":
            assert name in ALARMED, name
        else:  # a gauge: the poller prints it every run, traffic or not
            assert props["Statistic"] == "Maximum" and props["Period"] >= 60, name
        assert props["TreatMissingData"] == "notBreaching", name
