"""Least privilege per function, judged on the calls the functions really make.

Each function's instance runs in process against moto (tables, the keys
secrets) and loopback upstreams, through what its requests do in service:
the client functions answer chats (success, failover, breaker trip and
probe, a budgeted and limited key's spend and limit blocks, latency flush) and the buffered client
paths; the admin function every admin path; the poller a scheduled run
that polls quota, folds latency and audits an expired override. Every AWS
call is recorded on humpyard's botocore session and replayed as IAM
authorizations against that function's role in the translated template
(``iam_replay``): each must be allowed, and each DynamoDB grant must be
used by some call (a grant nothing needs is a privilege too many).

The static checks below pin the rest: S3 read of the one configuration
key, ``kms:Decrypt`` only through Secrets Manager and only with a
customer-managed key, exact secret ARNs, and a parameter pattern that
refuses a partial secret ARN.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from iam_replay import MANAGED, Recorder, Request, allowing, authorizations, log_writes
from infra_support import ROOT, template, translated
from moto import mock_aws
from template_eval import Deployment

from humpyard.aws.build import Instance
from humpyard.aws.clients import session
from humpyard.clock import FakeClock
from humpyard.store.dynamodb import create_tables
from tests.support import FakeUpstream, ok, status
from tests.support.logging_state import isolated_humpyard_logging

EVENTS = ROOT / "infra" / "events"
APP_KEY, OPS_KEY = "hk-app-example-key", "hk-ops-example-key"  # what infra/events carry
STATE, LEDGER = "stack-state", "stack-ledger"
CLIENT_FUNCTIONS = ("GatewayFunction", "StreamFunction")


def _config(primary: str, backup: str, quota: str) -> str:
    return f"""
state_refresh_ms = 1000

[providers.up1]
base_url = "{primary}"
timeout_secs = 10

[providers.up2]
base_url = "{backup}"
timeout_secs = 10

[providers.quota]
base_url = "{quota}"
api_key_env = "QUOTA_KEY"
quota_source = "opencode-go"

[targets.primary]
endpoints = [{{ provider = "up1", model = "model-a", price = {{ input = 1.0, output = 2.0 }} }}]

[targets.backup]
endpoints = [{{ provider = "up2", model = "model-b", price = {{ input = 1.0, output = 2.0 }} }}]

[routes.auto]
type = "passthrough"
targets = ["primary", "backup"]

[routes.quick]
type = "fastest"
targets = ["primary", "backup"]

[health]
failure_threshold = 1
cooldown_secs = 30

[ledger]
decision_retention_days = 30

[keys.app]
key_env = "APP_KEY"
budget = {{ usd = 100.0, period = "day" }}
rpm_limit = 1000
tpm_limit = 10000000
max_parallel_requests = 8

[keys.ops]
key_env = "OPS_KEY"
manage_overrides = true
admin = true
"""


def _entry_surfaces(entry: str) -> tuple[str, ...]:
    """The surfaces a function's entry module binds (``SURFACES``), read from it."""
    spec = importlib.util.spec_from_file_location("_surfaces_of_" + entry.replace("/", "_"),
                                                  ROOT / "functions" / entry)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.SURFACES)


ENTRY_SURFACES = {"GatewayFunction": _entry_surfaces("gateway/app.py"),
                  "StreamFunction": _entry_surfaces("stream/main.py"),
                  "AdminFunction": _entry_surfaces("admin/app.py")}


def _event(name: str, *, path: str | None = None, method: str | None = None,
           body: Any = None, query: dict[str, str] | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    if path is not None:
        ev["path"] = ev["resource"] = ev["requestContext"]["resourcePath"] = path
    if method is not None:
        ev["httpMethod"] = ev["requestContext"]["httpMethod"] = method
    if body is not None:
        ev["body"] = json.dumps(body)
    if query is not None:
        ev["queryStringParameters"] = query
        ev["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return ev


class _Context:
    function_name, function_version, memory_limit_in_mb = "humpyard-fn", "$LATEST", 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:humpyard-fn"
    aws_request_id = "privileges"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@dataclass
class Run:
    """What the functions did: the recorder, and the deployment they were judged against."""

    recorder: Recorder
    deployment: Deployment
    answers: dict[str, int] = field(default_factory=dict)


def _serve(instance: Instance, ev: dict[str, Any], answers: dict[str, int], label: str) -> Any:
    resp = instance.http(ev, _Context())
    answers[label] = resp["statusCode"]
    return resp


def _client(instance: Instance, clock: FakeClock, primary: FakeUpstream,
            answers: dict[str, int]) -> None:
    chat = _event("chat_post")
    assert _serve(instance, chat, answers, "chat")["statusCode"] == 200
    primary.script(status(500))
    failed_over = _serve(instance, chat, answers, "failover")
    assert failed_over["headers"]["x-humpyard-target"] == "backup"
    clock.advance(6)  # the state refresh and the latency flush fall due
    _serve(instance, chat, answers, "chat after refresh")
    clock.advance(31)  # the cooldown ends: this instance takes the probe lease
    probe = _serve(instance, chat, answers, "probe")
    assert probe["headers"]["x-humpyard-target"] == "primary", probe["headers"]
    _serve(instance, _event("chat_post", path="/v1/models", method="GET"), answers, "models")
    _serve(instance, _event("chat_post", path="/v1/route/explain",
                            body={"model": "auto"}), answers, "explain")
    _serve(instance, _event("chat_post", path="/v1/messages/count_tokens",
                            body={"model": "auto", "messages": [{"role": "user",
                                                                 "content": "hi"}]}),
           answers, "count_tokens")
    _serve(instance, _event("chat_post", path="/v1/nothing-here", method="GET"), answers, "404")
    for probe_path in ("/healthz", "/readyz"):  # readyz reads the state table (Store.ping)
        _serve(instance, _event("chat_post", path=probe_path, method="GET"), answers, probe_path)


def _admin(instance: Instance, clock: FakeClock, answers: dict[str, int]) -> str:
    def get(path: str, **query: str) -> Any:
        return _serve(instance, _event("health_get", path=path, method="GET",
                                       query=query or None), answers, f"GET {path} {query}")

    created = _serve(instance, _event("overrides_post"), answers, "POST override")
    assert created["statusCode"] == 201, created["body"]
    override = json.loads(created["body"])["id"]
    listed = json.loads(get("/v1/decisions")["body"])
    decisions = listed.get("decisions") or listed.get("items") or []
    assert decisions, listed
    get(f"/v1/decisions/{decisions[0]['request_id']}")
    for name, value in [("route", "auto"), ("outcome", "success"), ("key", "app"),
                        ("rule", "default")]:
        get("/v1/decisions", **{name: value})
    for group in ("route", "target", "provider", "key"):
        get("/v1/stats", group_by=group)
    for path in ("/v1/overrides", "/v1/health", "/v1/config", "/v1/quota", "/v1/quota/history",
                 "/metrics", "/ui"):
        get(path)
    get("/v1/quota/nope")  # an operator's typo: a refusal, recorded like any other
    deleted = _serve(instance, _event("health_get", path=f"/v1/overrides/{override}",
                                      method="DELETE"), answers, "DELETE override")
    assert deleted["statusCode"] in (200, 204), deleted["body"]
    short = _event("overrides_post", body={"kind": "disable_target", "subject": "backup",
                                           "reason": "maintenance", "expires_in_secs": 60})
    created = _serve(instance, short, answers, "POST short override")
    assert created["statusCode"] == 201, created["body"]
    return str(json.loads(created["body"])["id"])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    saved = dict(os.environ)
    for name in [n for n in os.environ if n.startswith(("HUMPYARD_", "POWERTOOLS_", "AWS_"))]:
        del os.environ[name]
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_REGION="us-east-1")
    recorder = Recorder()
    session().register("before-parameter-build", recorder, unique_id="iam-replay")
    try:
        with isolated_humpyard_logging(), mock_aws(), FakeUpstream() as primary, \
                FakeUpstream() as backup, FakeUpstream() as quota:
            yield _run(recorder, tmp_path_factory.mktemp("privileges"), primary, backup, quota)
    finally:
        session().unregister("before-parameter-build", unique_id="iam-replay")
        os.environ.clear()
        os.environ.update(saved)


def _run(recorder: Recorder, tmp: Path, primary: FakeUpstream, backup: FakeUpstream,
         quota: FakeUpstream) -> Run:
    backup.default = ok("from backup")
    quota.default = status(200, body={"usage": {"rolling": {
        "status": "ok", "percent": 42.5, "resetsAt": "2030-01-01T00:00:00Z"}}})
    create_tables(boto3.client("dynamodb"), STATE, LEDGER)
    secrets = boto3.client("secretsmanager")
    generated = secrets.create_secret(Name="humpyard-dev/client-key",
                                      SecretString=json.dumps({"HUMPYARD_CLIENT_KEY": "gen"}))
    provider = secrets.create_secret(Name="humpyard/provider-keys", SecretString=json.dumps(
        {"APP_KEY": APP_KEY, "OPS_KEY": OPS_KEY, "QUOTA_KEY": "quota-secret"}))
    config = tmp / "humpyard.toml"
    config.write_text(_config(primary.url, backup.url, quota.url))
    parameters = {"ProviderKeysSecretArn": provider["ARN"]}
    deployment = Deployment(translated(parameters), parameters,
                            physical={"StateTable": STATE, "LedgerTable": LEDGER,
                                      "ClientKeySecret": generated["ARN"]})
    clock = FakeClock()
    answers: dict[str, int] = {}

    def instance(function: str) -> Instance:
        env = {**deployment.environment(function), "HUMPYARD_CONFIG": str(config),
               "LAMBDA_TASK_ROOT": str(ROOT / "functions")}
        return Instance.build(env, clock=clock, surfaces=ENTRY_SURFACES.get(function,
                                                                            ("client",)))

    recorder.label = "client"
    client = instance("GatewayFunction")
    try:
        _client(client, clock, primary, answers)
    finally:
        client.close()
    recorder.label = "admin"
    admin = instance("AdminFunction")
    try:
        _admin(admin, clock, answers)
    finally:
        admin.close()
    recorder.label = "poller"
    poller = instance("QuotaPollerFunction")
    try:
        clock.advance(120)  # the short override is due
        from importlib.util import module_from_spec, spec_from_file_location
        spec = spec_from_file_location("_poller_entry", ROOT / "functions/quota_poller/app.py")
        assert spec is not None and spec.loader is not None
        module = module_from_spec(spec)
        spec.loader.exec_module(module)
        summary = poller.run(module._run(poller))
        assert summary["quota_providers"] == 1 and len(summary["overrides_expired"]) == 1
        assert [r.path for r in quota.requests] == ["/v1/usage"]
        clock.advance(120)  # the next sample: the cost since the last one is read
        quota.default = status(200, body={"usage": {"rolling": {
            "status": "ok", "percent": 57.5, "resetsAt": "2030-01-01T00:00:00Z"}}})
        poller.run(module._run(poller))
        assert [r.path for r in quota.requests] == ["/v1/usage"] * 2
    finally:
        poller.close()
    return Run(recorder, deployment, answers)


def test_the_scenarios_were_served(run: Run) -> None:
    """A refused request makes no DynamoDB call, so the replay is only as good as this."""
    refused = {label: code for label, code in run.answers.items() if code >= 400}
    assert refused == {"404": 404, "GET /v1/quota/nope {}": 404}, refused
    assert len(run.answers) >= 25


ROLES = {"client": CLIENT_FUNCTIONS, "admin": ("AdminFunction",),
         "poller": ("QuotaPollerFunction",)}


@pytest.mark.parametrize("label", sorted(ROLES))
def test_every_call_a_function_makes_is_allowed_by_its_role(run: Run, label: str) -> None:
    calls = run.recorder.of(label)
    assert any(service == "dynamodb" for service, _, _ in calls), calls
    assert any(op == "GetSecretValue" for _, op, _ in calls)
    for function in ROLES[label]:
        denied = sorted({str(req) for service, op, params in calls
                         for req in authorizations(service, op, params)
                         if not _effective(run.deployment, function, req)})
        assert not denied, f"{function} would be denied:\n" + "\n".join(denied)


@pytest.mark.parametrize("label", sorted(ROLES))
def test_every_dynamodb_grant_is_used(run: Run, label: str) -> None:
    requests = [req for service, op, params in run.recorder.of(label)
                for req in authorizations(service, op, params)]
    for function in ROLES[label]:
        statements = [st for st in run.deployment.role_statements(function)
                      if any(a.startswith("dynamodb:") for a in _listed(st["Action"]))]
        for st in statements:
            patterns = st.get("Condition", {}).get("ForAllValues:StringLike", {}).get(
                "dynamodb:LeadingKeys", [None])
            # every action on every key it names: a statement granting PutItem and
            # DeleteItem on "override" and "live" grants four things, each needed
            for action in _listed(st["Action"]):
                one = {**st, "Action": [action]}
                used = [r for r in requests if allowing([one], r) is not None]
                assert used, f"{function}: {st.get('Sid')} grants {action}, which no call needs"
                for pattern in patterns:
                    if pattern is None:
                        continue
                    assert any(re.fullmatch(pattern.replace("*", ".*"), k)
                               for r in used for k in r.leading_keys), (
                        f"{function}: {st.get('Sid')} grants {action} on {pattern!r}, "
                        "which no call needs")


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _effective(d: Deployment, function: str, request: Request) -> bool:
    """Whether IAM allows ``request`` to ``function``'s role: one of its policies (inline,
    or the managed ones SAM attaches) allows it, and so does its permissions boundary."""
    identity = list(d.role_statements(function))
    for arn in d.managed_policies(function):
        assert arn in MANAGED, f"{function}: managed policy {arn} not known to iam_replay"
        identity += MANAGED[arn]
    boundary = d.boundary_statements(function)
    return allowing(identity, request) is not None and (
        boundary is None or allowing(boundary, request) is not None)


FUNCTIONS = ("GatewayFunction", "StreamFunction", "AdminFunction", "QuotaPollerFunction")


def test_each_function_writes_its_own_log_group_and_no_other() -> None:
    d = Deployment(translated())
    names = {f: d.functions()[f]["FunctionName"] for f in FUNCTIONS}
    assert len(set(names.values())) == len(FUNCTIONS)
    for function, name in names.items():
        groups = {d.resolve(r["Properties"]["LogGroupName"]) for r in d.doc["Resources"].values()
                  if r["Type"] == "AWS::Logs::LogGroup"}
        assert f"/aws/lambda/{name}" in groups  # the template makes it: no CreateLogGroup
        for request in log_writes(name):
            assert _effective(d, function, request), (function, request)
        for other in set(names.values()) - {name}:
            for request in log_writes(other):
                assert not _effective(d, function, request), (function, request)
        create = Request("logs:CreateLogGroup",
                         f"arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/{name}")
        assert not _effective(d, function, create)


def test_no_log_grant_that_delivering_the_logs_does_not_use() -> None:
    # "Nothing granted that no scenario uses", for logs: what the boundary lets through
    # of logs is exactly the two calls Lambda makes for the function, on its own group.
    d = Deployment(translated())
    for function in FUNCTIONS:
        boundary = d.boundary_statements(function)
        assert boundary is not None, function
        used = log_writes(d.functions()[function]["FunctionName"])
        for st in boundary:
            if "NotAction" in st:
                assert _listed(st["NotAction"]) == ["logs:*"], st  # no log action through
                continue
            for action in _listed(st["Action"]):
                assert action.startswith("logs:"), st
                one = {**st, "Action": [action]}
                assert any(allowing([one], r) for r in used), (function, action)
            assert all(r.endswith(":*") and "log-group:/aws/lambda/" in r
                       for r in _listed(st["Resource"])), st


def test_the_client_functions_have_the_same_grants() -> None:
    d = Deployment(translated())
    gateway, stream = (d.role_statements(f) for f in CLIENT_FUNCTIONS)
    assert gateway == stream


def test_no_function_may_scan_or_touch_items_outside_its_keys(run: Run) -> None:
    for function in ("GatewayFunction", "StreamFunction", "QuotaPollerFunction"):
        statements = run.deployment.role_statements(function)
        for table in (STATE, LEDGER):
            arn = f"arn:aws:dynamodb:us-east-1:123456789012:table/{table}"
            assert allowing(statements, Request("dynamodb:Scan", arn)) is None
            for action in ("PutItem", "DeleteItem", "UpdateItem"):
                assert allowing(statements, Request(f"dynamodb:{action}", arn,
                                                    frozenset({"counter"}))) is None, function
    client = run.deployment.role_statements("GatewayFunction")
    ledger = f"arn:aws:dynamodb:us-east-1:123456789012:table/{LEDGER}"
    assert allowing(client, Request("dynamodb:Query", ledger + "/index/by_day",
                                    frozenset({"decisions#2030-01-01"}))) is None
    assert allowing(client, Request("dynamodb:GetItem", ledger,
                                    frozenset({"decision#someone-elses"}))) is None


# -- static grants ----------------------------------------------------------------------------


def _grants(d: Deployment, function: str, prefix: str) -> list[dict[str, Any]]:
    return [st for st in d.role_statements(function)
            if any(a.startswith(prefix) for a in _listed(st["Action"]))]


@pytest.mark.parametrize("function", ["GatewayFunction", "StreamFunction", "AdminFunction",
                                      "QuotaPollerFunction"])
def test_s3_read_is_of_the_one_configuration_key(function: str) -> None:
    d = Deployment(translated({"ConfigS3Bucket": "conf-bucket", "ConfigS3Key": "gw/h.toml"}),
                   {"ConfigS3Bucket": "conf-bucket", "ConfigS3Key": "gw/h.toml"})
    (st,) = _grants(d, function, "s3:")
    assert _listed(st["Action"]) == ["s3:GetObject"]
    assert _listed(st["Resource"]) == ["arn:aws:s3:::conf-bucket/gw/h.toml"]
    assert not _grants(Deployment(translated()), function, "s3:")


@pytest.mark.parametrize("function", ["GatewayFunction", "AdminFunction", "QuotaPollerFunction"])
def test_kms_decrypt_only_with_a_customer_managed_key_and_only_through_secrets_manager(
        function: str) -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    secret = "arn:aws:secretsmanager:us-east-1:123456789012:secret:humpyard/keys-AbC123"
    params = {"ProviderKeysSecretArn": secret, "ProviderKeysKmsKeyArn": key}
    d = Deployment(translated(params), params)
    (st,) = _grants(d, function, "kms:")
    assert _listed(st["Action"]) == ["kms:Decrypt"] and _listed(st["Resource"]) == [key]
    via = "secretsmanager.us-east-1.amazonaws.com"
    assert allowing([st], Request("kms:Decrypt", key, via=via)) is st
    assert allowing([st], Request("kms:Decrypt", key, via="s3.us-east-1.amazonaws.com")) is None
    assert not _grants(Deployment(translated({"ProviderKeysSecretArn": secret}),
                                  {"ProviderKeysSecretArn": secret}), function, "kms:")
    (secrets,) = _grants(d, function, "secretsmanager:")
    assert _listed(secrets["Action"]) == ["secretsmanager:GetSecretValue"]
    assert sorted(_listed(secrets["Resource"])) == sorted([secret, d.ref("ClientKeySecret")])
    rule = template()["Rules"]["KmsKeyNeedsTheSecret"]
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [
        {"Ref": "ProviderKeysSecretArn"}, ""]}]}


@pytest.mark.parametrize(("arn", "accepted"), [
    ("", True),
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:humpyard/keys-AbC123", True),
    ("arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:k-Xy12zW", True),
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:humpyard/keys", False),  # partial
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:humpyard/keys-*", False),
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:humpyard/keys-AbC12", False),
    ("arn:aws:secretsmanager:us-east-1:123456789012:secret:*", False),
    ("humpyard/keys", False),
])
def test_the_secret_parameter_takes_only_a_complete_arn(arn: str, accepted: bool) -> None:
    pattern = template()["Parameters"]["ProviderKeysSecretArn"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, arn)) is accepted



# -- Bedrock: the client functions call exactly the listed models ---------------------------


BEDROCK_PROFILE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
BEDROCK_ARNS = [
    f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/{BEDROCK_PROFILE}",
    "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0",
]


def test_bedrock_calls_are_allowed_on_exactly_the_listed_models(monkeypatch, tmp_path) -> None:
    """Real Bedrock calls (InvokeModel, its stream, Converse, CountTokens) made through a
    gateway to the fake Bedrock runtime, replayed against each client role; a model the
    parameter does not list, and every function without the parameter, is denied."""
    from iam_replay import bedrock_authorization

    from tests.support.fake_bedrock import ACCESS_KEY, SECRET_KEY, SESSION_TOKEN, FakeBedrock
    from tests.support.gateway import running_gateway

    for name, value in (("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
                        ("AWS_SESSION_TOKEN", SESSION_TOKEN),
                        ("AWS_CONFIG_FILE", str(tmp_path / "none")),
                        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none")),
                        ("AWS_EC2_METADATA_DISABLED", "true")):
        monkeypatch.setenv(name, value)
    params = {"BedrockModelArns": ",".join(BEDROCK_ARNS)}
    d = Deployment(translated(params), params)
    with FakeBedrock() as bedrock, running_gateway(f"""
[providers.bedrock]
protocol = "bedrock"
region = "us-east-1"
base_url = "{bedrock.url}"
[targets.claude]
endpoints = [{{ provider = "bedrock", model = "{BEDROCK_PROFILE}" }}]
[targets.nova]
endpoints = [{{ provider = "bedrock", model = "amazon.nova-lite-v1:0" }}]
[routes.claude]
targets = ["claude"]
[routes.nova]
targets = ["nova"]
""") as gw, gw.client() as c:
        hello = [{"role": "user", "content": "hi"}]
        for route in ("claude", "nova"):
            for stream in (False, True):
                r = c.post("/v1/chat/completions", json={"model": route, "messages": hello,
                                                         "stream": stream})
                assert r.status_code == 200, r.text
        r = c.post("/v1/messages/count_tokens", json={"model": "claude", "messages": hello})
        assert r.json()["input_tokens"] == bedrock.count
        calls = [(got.operation, got.model) for got in bedrock.received]
    assert sorted({op for op, _ in calls}) == ["converse", "converse-stream", "count-tokens",
                                               "invoke", "invoke-with-response-stream"]
    requests = [bedrock_authorization(op, model, "us-east-1") for op, model in calls]
    for function in CLIENT_FUNCTIONS:
        statements = d.role_statements(function)
        denied = [r for r in requests if allowing(statements, r) is None]
        assert not denied, f"{function} would be denied: {denied}"
        other = bedrock_authorization("invoke", "anthropic.claude-opus-4-1-20250805-v1:0",
                                      "us-east-1")
        assert allowing(statements, other) is None
    for function in ("AdminFunction", "QuotaPollerFunction"):
        assert not _grants(d, function, "bedrock:")
    plain = Deployment(translated())
    for function in CLIENT_FUNCTIONS:
        assert not _grants(plain, function, "bedrock:")


@pytest.mark.parametrize(("value", "accepted"), [
    ("", True),
    (",".join(BEDROCK_ARNS), True),
    ("arn:aws:bedrock:*::foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0", True),
    ("arn:aws:bedrock:us-east-1::foundation-model/*", False),
    ("*", False),
    ("anthropic.claude-sonnet-4-5-20250929-v1:0", False),
])
def test_the_bedrock_parameter_takes_only_exact_model_arns(value: str, accepted: bool) -> None:
    pattern = template()["Parameters"]["BedrockModelArns"]["AllowedPattern"]
    assert bool(re.fullmatch(pattern, value)) is accepted
