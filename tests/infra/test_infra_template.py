"""What SAM makes of template.yaml: streaming chat, IAM on admin paths, tables, alarms.

Read from the translated CloudFormation (``sam_translate.py`` in
``.venv-infra``), so these check what would be deployed, not the shorthand.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from infra_support import resources, template, translated
from starlette.routing import Route
from template_eval import Deployment

from humpyard.aws.env import LambdaEnv
from humpyard.http.app import route_table
from humpyard.http.intake import ClientPath
from humpyard.metrics import GatewayMetrics, Metrics, emf
from humpyard.store.dynamodb_schema import LEDGER_TABLE, STATE_TABLE, TTL_ATTRIBUTE

# Every client path that can answer with a stream (a ``ClientPath`` in the route table):
# derived, so a client path added later cannot be left on the buffered function, whose
# answers API Gateway cuts at 29 s.
STREAMED = {(route.path, method.lower()) for _, route in route_table()
            if isinstance(route.endpoint, ClientPath) for method in route.methods or ()
            if method != "HEAD"}
ADMIN = re.compile(r"^/(v1/overrides|v1/decisions|v1/health$|v1/config$|v1/stats$|v1/quota"
                   r"|metrics$|ui)")


def _api_paths() -> dict[str, dict[str, Any]]:
    doc = translated()
    (api,) = resources(doc, "AWS::ApiGateway::RestApi").values()
    return api["Properties"]["Body"]["paths"]  # type: ignore[no-any-return]


def _integrations() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    return [(path, method, op, op["x-amazon-apigateway-integration"])
            for path, item in _api_paths().items() for method, op in item.items()]


def _function_of(integration: dict[str, Any]) -> str:
    uri = integration["uri"]["Fn::Sub"]
    found = re.search(r"\$\{(\w+)\.Arn\}", uri)
    assert found, uri
    return found.group(1)


def test_the_streamed_set_covers_every_client_protocol() -> None:
    assert {("/v1/chat/completions", "post"), ("/v1/messages", "post"),
            ("/v1/responses", "post")} <= STREAMED


def test_every_streaming_client_path_uses_the_streaming_integration() -> None:
    seen = set()
    for path, method, _, integ in _integrations():
        uri = integ["uri"]["Fn::Sub"]
        if (path, method) in STREAMED:
            seen.add((path, method))
            assert integ["type"] == "aws_proxy"
            assert integ["responseTransferMode"] == "STREAM"
            assert uri.endswith("/response-streaming-invocations")
            assert ":lambda:path/2021-11-15/functions/" in uri
            assert integ["timeoutInMillis"] == 900000
            assert _function_of(integ) == "StreamFunction"
        else:
            assert "responseTransferMode" not in integ, (path, method)
            assert uri.endswith("/invocations") and "/2015-03-31/" in uri, (path, method)
    assert seen == STREAMED


def test_admin_paths_and_only_they_require_iam() -> None:
    admin_paths = set()
    for path, method, op, integ in _integrations():
        iam = op.get("security") == [{"AWS_IAM": []}]
        assert iam == bool(ADMIN.match(path)), (path, method)
        if iam:
            admin_paths.add(path)
            assert _function_of(integ) == "AdminFunction"
            assert "credentials" not in integ  # invoked via the resource policy, not the caller
    assert {"/v1/overrides", "/v1/overrides/{proxy+}", "/v1/decisions", "/v1/decisions/{proxy+}",
            "/v1/health", "/v1/config", "/v1/stats", "/v1/quota", "/v1/quota/{proxy+}",
            "/metrics", "/ui", "/ui/{proxy+}"} == admin_paths


def _resource_for(path: str, api_paths: set[str]) -> str:
    """The API Gateway resource a request path lands on (literal, then greedy proxy)."""
    if path in api_paths:
        return path
    parts = path.strip("/").split("/")
    for resource in api_paths:  # a resource with a {parameter} segment: one segment each
        segments = resource.strip("/").split("/")
        if "{proxy+}" not in resource and len(segments) == len(parts) and all(
                seg == part or (seg.startswith("{") and seg.endswith("}"))
                for seg, part in zip(segments, parts, strict=True)):
            return resource
    for n in range(len(parts), -1, -1):
        prefix = "/" + "/".join(parts[:n])
        candidate = (prefix.rstrip("/") + "/{proxy+}")
        if candidate in api_paths and n < len(parts):
            return candidate
    raise AssertionError(f"no API resource serves {path}")


def test_every_app_route_reaches_the_right_function() -> None:
    from humpyard.config import load_config_text
    from humpyard.http.app import create_app

    app = create_app(load_config_text(""))
    asyncio.run(app.state.gateway.aclose())  # only its routes are needed
    api = _api_paths()
    for route in app.routes:
        assert isinstance(route, Route)
        path = re.sub(r"\{\w+\}", "x", route.path)
        resource = _resource_for(path, set(api))
        methods = {m.lower() for m in (route.methods or ())} - {"head"}
        for method in methods:
            op = api[resource].get(method) or api[resource]["x-amazon-apigateway-any-method"]
            fn = _function_of(op["x-amazon-apigateway-integration"])
            if ADMIN.match(route.path):
                expected = "AdminFunction"
            elif (route.path, method) in STREAMED:
                expected = "StreamFunction"
            else:
                expected = "GatewayFunction"
            assert fn == expected, (route.path, method, resource)


def _normalised(spec: dict[str, Any]) -> dict[str, Any]:
    def attrs(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return sorted((a["AttributeName"], a["AttributeType"]) for a in items)

    out: dict[str, Any] = {
        "KeySchema": [(k["AttributeName"], k["KeyType"]) for k in spec["KeySchema"]],
        "AttributeDefinitions": attrs(spec["AttributeDefinitions"]),
        "BillingMode": spec["BillingMode"],
    }
    gsis = spec.get("GlobalSecondaryIndexes", [])
    out["GlobalSecondaryIndexes"] = sorted(
        (g["IndexName"], tuple((k["AttributeName"], k["KeyType"]) for k in g["KeySchema"]),
         g["Projection"]["ProjectionType"], tuple(g["Projection"].get("NonKeyAttributes", ())))
        for g in gsis)
    return out


@pytest.mark.parametrize(("logical_id", "spec"),
                         [("StateTable", STATE_TABLE), ("LedgerTable", LEDGER_TABLE)])
def test_tables_match_create_tables_with_point_in_time_recovery(logical_id: str,
                                                                spec: dict[str, Any]) -> None:
    table = template()["Resources"][logical_id]
    assert table["Type"] == "AWS::DynamoDB::Table"
    assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain"
    # as deployed with the default parameters (on demand; PROVISIONED: test_infra_capacity.py)
    deployed = Deployment(translated())
    props = deployed.resolve(deployed.doc["Resources"][logical_id]["Properties"])
    assert _normalised(props) == _normalised(spec)
    assert "ProvisionedThroughput" not in props
    assert all("ProvisionedThroughput" not in g for g in props.get("GlobalSecondaryIndexes", []))
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert "TableName" not in props  # CloudFormation names it; the functions get it by !Ref
    # both: the ledger's decisions, spend and audit are as hard to rebuild as the state
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_functions_get_tables_and_settings_from_the_environment() -> None:
    t = template()
    variables = t["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["HUMPYARD_STATE_TABLE"] == {"Ref": "StateTable"}
    assert variables["HUMPYARD_LEDGER_TABLE"] == {"Ref": "LedgerTable"}
    assert variables["POWERTOOLS_SERVICE_NAME"] == "humpyard"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Humpyard"
    aliases = {f.alias for f in LambdaEnv.model_fields.values()}
    assert {k for k in variables if k.startswith("HUMPYARD_")} <= aliases
    assert t["Globals"]["Function"]["Runtime"] == "python3.12"
    assert t["Globals"]["Function"]["Architectures"] == ["arm64"]
    stream = t["Resources"]["StreamFunction"]["Properties"]
    assert stream["Environment"]["Variables"]["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert stream["Environment"]["Variables"]["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert "LambdaAdapterLayerArm64" in stream["Layers"][0]["Fn::Sub"]


def test_no_secret_is_written_in_the_template() -> None:
    t = template()
    for res in t["Resources"].values():
        env = res.get("Properties", {}).get("Environment", {}).get("Variables", {})
        for name in env:
            assert not re.search(r"KEY|TOKEN|PASSWORD|SECRET(?!S_ARN)", name), name
    secret = t["Globals"]["Function"]["Environment"]["Variables"]["HUMPYARD_SECRETS_ARN"]
    assert secret == {"Fn::If": ["HasKeysSecret",
                                 {"Fn::Sub": "${ClientKeySecret},${ProviderKeysSecretArn}"},
                                 {"Ref": "ClientKeySecret"}]}
    generated = t["Resources"]["ClientKeySecret"]["Properties"]
    assert "SecretString" not in generated and "GenerateSecretString" in generated


def _emf_dimensions(metric_name: str) -> list[str]:
    gm = GatewayMetrics(Metrics())
    gm.override_oldest_age.set(1.0)
    gm.fallback_blocked.inc(route="r")
    for record in emf.records(gm.metrics.collect(), namespace="Humpyard", service="humpyard",
                              timestamp_ms=0):
        (directive,) = record["_aws"]["CloudWatchMetrics"]  # type: ignore[index]
        if any(m["Name"] == metric_name for m in directive["Metrics"]):
            (dims,) = directive["Dimensions"]
            return list(dims)
    raise AssertionError(f"{metric_name} is not in the EMF output")


def test_override_alarm_names_the_exact_emf_dimension_set() -> None:
    alarm = template()["Resources"]["HumpyardOverrideLong"]["Properties"]
    assert alarm["Namespace"] == "Humpyard"
    assert alarm["MetricName"] == "humpyard_override_oldest_age_seconds"
    assert [d["Name"] for d in alarm["Dimensions"]] == _emf_dimensions(alarm["MetricName"])
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "humpyard"}]
    assert alarm["Threshold"] == 21600 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Statistic"] == "Maximum"  # instances that never refreshed report 0


def test_fallback_alarm_queries_the_emf_schema_of_its_metric() -> None:
    props = template()["Resources"]["HumpyardFallbackBlocked"]["Properties"]
    (query,) = [m["Expression"] for m in props["Metrics"] if m.get("ReturnData")]
    found = re.search(r"SUM\((\w+)\) FROM SCHEMA\(Humpyard, ([\w, ]+)\)", " ".join(query.split()))
    assert found, query
    metric, dims = found.group(1), [d.strip() for d in found.group(2).split(",")]
    assert sorted(dims) == sorted(_emf_dimensions(metric))


def test_every_alarm_is_present_and_treats_missing_data_as_fine() -> None:
    alarms = resources(template(), "AWS::CloudWatch::Alarm")
    assert set(alarms) == {"HumpyardOverrideLong", "HumpyardHighFailureRate",
                           "HumpyardFallbackBlocked", "HumpyardLedgerWritesLost",
                           "HumpyardLedgerConflicts", "HumpyardLambdaErrors",
                           "HumpyardLambdaThrottles", "HumpyardDynamoDBThrottles"}
    for alarm in alarms.values():
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching"


def test_every_function_may_read_the_configuration_from_where_it_is_told() -> None:
    # S3 or AppConfig, each only when its parameters are set; the AppConfig grant
    # is the one profile's two data-plane calls
    doc = translated()
    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["HUMPYARD_CONFIG_APPCONFIG"]["Fn::If"][0] == "HasAppConfig"
    functions = resources(doc, "AWS::Serverless::Function") or resources(doc,
                                                                         "AWS::Lambda::Function")
    roles = resources(doc, "AWS::IAM::Role")
    assert len(functions) == 4 and len(roles) >= 4
    for fn_id in functions:
        role = roles[f"{fn_id}Role"]["Properties"]["Policies"]
        texts = [str(p) for p in role]
        assert any("HasConfigObject" in t and "s3:GetObject" in t for t in texts), fn_id
        [appconfig] = [p for p in role if "HasAppConfig" in str(p)]
        statement = appconfig["Fn::If"][1]["PolicyDocument"]["Statement"][0]
        assert sorted(statement["Action"]) == ["appconfig:GetLatestConfiguration",
                                               "appconfig:StartConfigurationSession"]
        assert statement["Resource"]["Fn::Sub"].endswith(
            "application/${AppConfigApplicationId}/environment/${AppConfigEnvironmentId}"
            "/configuration/${AppConfigProfileId}")
