"""``sam deploy`` with samconfig.toml's defaults gives working functions.

Each function's environment is read from the translated template as it would
be deployed with samconfig.toml's parameters (``template_eval``), and the
secrets ``HUMPYARD_SECRETS_ARN`` names are what the template makes: the
generated client key's JSON keys come from its ``GenerateSecretString``, a
provider-keys secret (when the parameter names one) holds what the bundled
file's header documents. Nothing here is a hand-written copy of the
environment, so a variable the template stops providing fails these tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import re
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import httpx
import pytest
from infra_support import ROOT, translated
from moto import mock_aws
from template_eval import Deployment, samconfig_parameters

from humpyard.aws.build import Instance
from humpyard.aws.env import LambdaEnv
from humpyard.config import load_config_text
from humpyard.store.dynamodb import create_tables

FUNCTIONS = ROOT / "functions"
EVENTS = ROOT / "infra" / "events"
BUNDLED = FUNCTIONS / "humpyard.toml"
PROVIDER_SECRET = ("arn:aws:secretsmanager:us-east-1:123456789012:secret:"
                   "humpyard/provider-keys-Xy12Ab")
# What Lambda itself adds to every function's environment (the parts humpyard reads).
RUNTIME = {"LAMBDA_TASK_ROOT": str(FUNCTIONS), "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512"}


def _deployment(config_env: str = "default", **extra: str) -> Deployment:
    parameters = {**samconfig_parameters(config_env), **extra}
    return Deployment(translated(parameters), parameters)


def _generated_secret(deployment: Deployment, logical_id: str) -> dict[str, str]:
    """A value of the shape the template's ``GenerateSecretString`` makes."""
    spec = deployment.doc["Resources"][logical_id]["Properties"]["GenerateSecretString"]
    value: dict[str, str] = json.loads(spec["SecretStringTemplate"])
    alphabet = string.ascii_letters + string.digits
    if not spec.get("ExcludePunctuation"):
        alphabet += string.punctuation
    length = int(spec.get("PasswordLength", 32))
    value[spec["GenerateStringKey"]] = "".join(random.Random(17).choices(alphabet, k=length))
    return value


def _documented_provider_keys() -> dict[str, str]:
    """The provider-keys secret the bundled file's header shows (its JSON example)."""
    header = "\n".join(line.lstrip("# ") for line in BUNDLED.read_text().splitlines()
                       if line.startswith("#"))
    found = re.search(r"\{[^{}]*\}", header)
    assert found, "the bundled file documents no provider-keys secret"
    return {name: f"value-of-{name.lower()}" for name in json.loads(found.group(0))}


def _secret_values(deployment: Deployment, arns: str) -> dict[str, str]:
    """What each secret ``arns`` names holds, in order (a later one wins a name)."""
    own = {deployment.ref(k): k for k, v in deployment.doc["Resources"].items()
           if v["Type"] == "AWS::SecretsManager::Secret"}
    values: dict[str, str] = {}
    for arn in arns.split(","):
        if arn in own:
            values.update(_generated_secret(deployment, own[arn]))
        else:
            assert arn == PROVIDER_SECRET, f"{arn}: a secret the test does not know"
            values.update(_documented_provider_keys())
    return values


def _env_names(text: str) -> tuple[set[str], set[str]]:
    provider = set(re.findall(r'^api_key_env = "(\w+)"', text, re.M))
    client = set(re.findall(r'^key_env = "(\w+)"', text, re.M))
    return provider, client


CASES = {
    "samconfig default": ("default", {}),
    "samconfig prod": ("prod", {}),
    "with a provider-keys secret": ("default", {"ProviderKeysSecretArn": PROVIDER_SECRET}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_bundled_config_loads_under_each_function_environment(case: str) -> None:
    config_env, extra = CASES[case]
    deployment = _deployment(config_env, **extra)
    functions = deployment.functions()
    assert set(functions) == {"GatewayFunction", "StreamFunction", "AdminFunction",
                              "QuotaPollerFunction"}
    text = BUNDLED.read_text()
    provider_names, client_names = _env_names(text)
    for name in functions:
        env = {**RUNTIME, **deployment.environment(name)}
        lambda_env = LambdaEnv.from_environ(env)
        assert lambda_env.config_file == BUNDLED and lambda_env.secrets_arn
        values = {**env, **_secret_values(deployment, lambda_env.secrets_arn)}

        config = load_config_text(text, source=str(BUNDLED), env=values)  # raises on errors

        assert client_names and client_names <= set(values), (name, client_names - set(values))
        missing = provider_names - set(values)
        if "ProviderKeysSecretArn" in extra:
            assert not missing and not config.warnings, (name, config.warnings)
        else:  # providers are called without a key until the secret is given
            assert missing == provider_names
            assert sorted(config.warnings) == sorted(
                f"providers.{p}.api_key_env: environment variable {config.providers[p].api_key_env}"
                " is not set; calls go without a key" for p in config.providers)


def test_the_generated_key_is_the_bundled_configs_and_the_outputs_say_how_to_read_it() -> None:
    deployment = _deployment()
    secret = deployment.doc["Resources"]["ClientKeySecret"]
    spec = secret["Properties"]["GenerateSecretString"]
    _, client_names = _env_names(BUNDLED.read_text())
    assert client_names == {spec["GenerateStringKey"]}
    assert int(spec["PasswordLength"]) >= 32 and spec["ExcludePunctuation"] is True
    outputs = deployment.resolve(deployment.doc["Outputs"])
    command = outputs["ClientKeyCommand"]["Value"]
    arn = deployment.ref("ClientKeySecret")
    assert f"--secret-id {arn}" in command and spec["GenerateStringKey"] in command
    assert outputs["ClientKeySecretArn"]["Value"] == arn
    for name in deployment.functions():  # every function reads it (the config names it)
        assert deployment.environment(name)["HUMPYARD_SECRETS_ARN"].split(",")[0] == arn


def _chain_secs(config: Any, route: str) -> float:
    """The longest a route can wait for a first byte: every endpoint of every target tried."""
    spec = config.routes[route]
    total = 0.0
    for target in (*spec.targets, *spec.tail):
        for endpoint in config.targets[target].endpoints:
            p = config.providers[endpoint.provider]
            total += p.connect_retry_window_secs + (
                (p.connect_timeout_secs + p.timeout_secs) * (1 + p.max_retries))
    return total


def test_provider_timeouts_fit_the_900_s_stream_integration() -> None:
    deployment = _deployment()
    stream = deployment.functions()["StreamFunction"]
    (api,) = [v for v in deployment.doc["Resources"].values()
              if v["Type"] == "AWS::ApiGateway::RestApi"]
    integrations = [integ for item in api["Properties"]["Body"]["paths"].values()
                    for op in item.values()
                    if "response-streaming-invocations"
                    in str(integ := op["x-amazon-apigateway-integration"])]
    assert integrations
    limit = min([int(stream["Timeout"])] + [i["timeoutInMillis"] / 1000 for i in integrations])
    assert limit == 900
    env = {**RUNTIME, **deployment.environment("StreamFunction")}
    flush = LambdaEnv.from_environ(env).flush_timeout_secs
    config = load_config_text(BUNDLED.read_text(), env={**env, **_documented_provider_keys(),
                                                        "HUMPYARD_CLIENT_KEY": "k"})
    for name, provider in config.providers.items():
        assert provider.timeout_secs + flush < limit, name
    for route in config.routes:
        assert _chain_secs(config, route) + flush < limit, (route, _chain_secs(config, route))


# -- the functions themselves, started as Lambda starts them ---------------------------------


def _load(path: Path) -> ModuleType:
    """Import a function's entry module afresh, as a new Lambda instance does."""
    name = f"_first_deploy_{path.parent.name}_{id(path)}_{random.random():.8f}".replace(".", "")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _event(name: str, *, path: str, method: str, headers: dict[str, str]) -> dict[str, Any]:
    ev: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    for key in [k for k in ev["headers"] if k.lower() in ("authorization", "x-api-key")]:
        del ev["headers"][key], ev["multiValueHeaders"][key]
    for key, value in headers.items():
        ev["headers"][key], ev["multiValueHeaders"][key] = value, [value]
    ev["path"] = ev["resource"] = ev["requestContext"]["resourcePath"] = path
    ev["requestContext"]["path"] = "/" + ev["requestContext"]["stage"] + path
    ev["httpMethod"] = ev["requestContext"]["httpMethod"] = method
    return ev


class _Context:
    function_name, function_version, memory_limit_in_mb = "humpyard-fn", "$LATEST", 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:humpyard-fn"
    aws_request_id = "0e5bd3c2-first-deploy"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Deployment, str]]:
    """moto holding what ``sam deploy`` creates: both tables and the generated secret."""
    for name in [n for n in list(os.environ)
                 if n.startswith(("HUMPYARD_", "POWERTOOLS_", "AWS_", "_X_AMZN"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        deployment = _deployment()
        spec = deployment.doc["Resources"]["ClientKeySecret"]["Properties"]
        value = _generated_secret(deployment, "ClientKeySecret")
        created = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name=deployment.resolve(spec["Name"]), SecretString=json.dumps(value))
        deployment.physical.update(ClientKeySecret=created["ARN"], StateTable="stack-state",
                                   LedgerTable="stack-ledger")
        create_tables(boto3.client("dynamodb", region_name="us-east-1"), "stack-state",
                      "stack-ledger")
        yield deployment, value[spec["GenerateSecretString"]["GenerateStringKey"]]


def _as_function(monkeypatch: pytest.MonkeyPatch, deployment: Deployment, name: str) -> None:
    for var, value in {**RUNTIME, **deployment.environment(name)}.items():
        monkeypatch.setenv(var, value)


def test_every_function_starts_and_serves_with_the_shipped_defaults(
        deployed: tuple[Deployment, str], monkeypatch: pytest.MonkeyPatch) -> None:
    deployment, key = deployed
    bearer = {"Authorization": f"Bearer {key}"}
    built: list[Any] = []
    try:
        _as_function(monkeypatch, deployment, "GatewayFunction")
        gateway = _load(FUNCTIONS / "gateway" / "app.py")
        models = gateway.handler(_event("chat_post", path="/v1/models", method="GET",
                                        headers=bearer), _Context())
        built.append(gateway._instance._value)
        assert models["statusCode"] == 200, models["body"]
        assert {"auto", "quick"} <= {m["id"] for m in json.loads(models["body"])["data"]}
        refused = gateway.handler(_event("chat_post", path="/v1/models", method="GET",
                                         headers={"Authorization": "Bearer not-the-key"}),
                                  _Context())
        assert refused["statusCode"] == 401

        _as_function(monkeypatch, deployment, "AdminFunction")
        admin = _load(FUNCTIONS / "admin" / "app.py")
        config = admin.handler(_event("health_get", path="/v1/config", method="GET",
                                      headers={"x-api-key": key}), _Context())
        built.append(admin._instance._value)
        assert config["statusCode"] == 200, config["body"]
        assert key not in config["body"]

        _as_function(monkeypatch, deployment, "QuotaPollerFunction")
        poller = _load(FUNCTIONS / "quota_poller" / "app.py")
        summary = poller.handler(json.loads((EVENTS / "scheduled.json").read_text()), _Context())
        built.append(poller._instance._value)
        assert summary["overrides_expired"] == []

        # The stream function: uvicorn calls main:create_app at INIT (run.sh), i.e.
        # Instance.build().asgi_app(), where the shipped configuration used to fail. A request
        # without the key is refused, one with it reaches routing (an unknown model: no
        # upstream is called).
        _as_function(monkeypatch, deployment, "StreamFunction")
        stream = Instance.build()
        built.append(stream)
        app = stream.asgi_app()
        body = {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}

        async def ask() -> tuple[int, int]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://lambda") as c:
                anon = await c.post("/v1/chat/completions", json=body)
                keyed = await c.post("/v1/chat/completions", json=body, headers=bearer)
            return anon.status_code, keyed.status_code

        anon, keyed = asyncio.run(ask())
        assert anon == 401 and keyed not in (401, 500), (anon, keyed)
    finally:
        for thing in built:
            close = getattr(thing, "close", None)
            if close is not None:
                close()


def test_junk_traffic_with_the_shipped_defaults_is_counted_not_written(
        deployed: tuple[Deployment, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The bundled file's refused_per_minute: a flood of wrong keys on one instance is
    # counted in full but written to the ledger only within the allowance (docs/deploy.md,
    # "What it costs"); and answered requests write no INFO line (log_requests = false).
    deployment, key = deployed
    _as_function(monkeypatch, deployment, "GatewayFunction")
    gateway = _load(FUNCTIONS / "gateway" / "app.py")
    try:
        wrong = _event("chat_post", path="/v1/chat/completions", method="POST",
                       headers={"Authorization": "Bearer not-the-key"})
        for _ in range(40):
            assert gateway.handler(wrong, _Context())["statusCode"] == 401
        ok = gateway.handler(_event("chat_post", path="/v1/models", method="GET",
                                    headers={"Authorization": f"Bearer {key}"}), _Context())
        assert ok["statusCode"] == 200
        instance = gateway._instance._value
        assert instance.gateway.metrics.refused.value(reason="invalid_api_key") == 40
        allowance = instance.gateway.config.refused_per_minute
        assert 0 < allowance <= 10
        instance.gateway.writer.flush(5)
        items = boto3.client("dynamodb", region_name="us-east-1").scan(
            TableName="stack-ledger")["Items"]
        decisions = [i for i in items if i["pk"]["S"].startswith("decision#")]
        assert 1 <= len(decisions) <= allowance + 1  # the bucket refills while it runs
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()
                 if x.startswith("{")]
        assert not [x for x in lines if str(x.get("message", "")).startswith("request ")]
    finally:
        instance = gateway._instance._value
        if instance is not None:
            instance.close()
