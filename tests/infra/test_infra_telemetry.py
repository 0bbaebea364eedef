"""The OpenTelemetryLayerArn parameter: the ADOT layer on every function, its wrapper on
the Mangum functions, OTLP from the stream function, and the X-Ray SDK path off.

Read from the translated template deployed with given parameters
(``template_eval.Deployment``), so each check is of the value CloudFormation
would set. The switch the gateway reads is ``humpyard.telemetry.enabled``, run
on each function's environment as deployed.
"""

from __future__ import annotations

from typing import Any

import pytest
from infra_support import translated
from template_eval import Deployment

from humpyard.telemetry import ADOT_WRAPPER, enabled

FUNCTIONS = ("GatewayFunction", "StreamFunction", "AdminFunction", "QuotaPollerFunction")
MANGUM = ("GatewayFunction", "AdminFunction", "QuotaPollerFunction")
ADOT = "arn:aws:lambda:eu-west-1:901920570463:layer:aws-otel-python-arm64-ver-1-0-0:1"


def _deployed(**parameters: str) -> Deployment:
    return Deployment(translated(parameters), parameters)


def _layers(d: Deployment, name: str) -> list[Any]:
    return list(d.functions()[name].get("Layers") or [])


@pytest.mark.parametrize("tracing", ["Disabled", "Active"])
def test_without_the_layer_no_function_traces_through_opentelemetry(tracing: str) -> None:
    d = _deployed(Tracing=tracing)
    for name in FUNCTIONS:
        env = d.environment(name)
        assert ADOT not in _layers(d, name)
        assert not enabled(env), (name, env)
        assert env["HUMPYARD_TRACING"] == ("true" if tracing == "Active" else "false")


@pytest.mark.parametrize("tracing", ["Disabled", "Active"])
def test_the_adot_layer_switches_every_function_to_opentelemetry(tracing: str) -> None:
    d = _deployed(OpenTelemetryLayerArn=ADOT, Tracing=tracing)
    for name in FUNCTIONS:
        env = d.environment(name)
        assert ADOT in _layers(d, name), name
        assert enabled(env), (name, env)
        assert env["OTEL_SERVICE_NAME"] == "humpyard"
        assert env["HUMPYARD_TRACING"] == "false", name  # the deprecated X-Ray SDK is off
    for name in MANGUM:
        assert d.environment(name)["AWS_LAMBDA_EXEC_WRAPPER"] == ADOT_WRAPPER, name
    stream = d.environment("StreamFunction")
    assert stream["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"  # the Web Adapter's
    assert stream["OTEL_TRACES_EXPORTER"] == "otlp"
