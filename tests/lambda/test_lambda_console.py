"""``humpyard console --stack``: an operator's local console on an AWS deployment's tables.

The "deployment" is a CloudFormation stack on a moto server whose two
DynamoDB tables are made from ``store/dynamodb_schema.py`` (as
``template.yaml`` makes them) and whose outputs name them, as the template's
``StateTableName`` and ``LedgerTableName`` do; a Lambda instance (``Driver``:
the real ``functions/gateway/app.py`` in a child process) serves on them. The
console is a real ``humpyard console`` child with the deployment's
configuration file (no ``[store]``), the operator's (dummy) credentials and
the stack's name: it lists the instance's decisions, and an override created
through it is honoured by the instance; it serves no client traffic.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from lambda_support import APP_KEY, OPS_KEY, Driver, event, gateway_config

from humpyard.store.dynamodb_schema import LEDGER_TABLE, STATE_TABLE
from tests.durability.process import ServeProcess
from tests.support import FakeUpstream, ok

REFRESH_MS = 200
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
KEYS_TOML = """
[keys.app]
key_env = "APP_KEY"

[keys.ops]
key_env = "OPS_KEY"
admin = true
manage_overrides = true
"""


def deploy_stack(moto_url: str) -> str:
    """A stack holding the two tables, with the template's two outputs; its name."""
    name = f"humpyard-{uuid.uuid4().hex[:8]}"
    template = {
        "Resources": {
            "StateTable": {"Type": "AWS::DynamoDB::Table",
                           "Properties": {**STATE_TABLE, "TableName": f"{name}-state"}},
            "LedgerTable": {"Type": "AWS::DynamoDB::Table",
                            "Properties": {**LEDGER_TABLE, "TableName": f"{name}-ledger"}},
        },
        "Outputs": {"StateTableName": {"Value": {"Ref": "StateTable"}},
                    "LedgerTableName": {"Value": {"Ref": "LedgerTable"}}},
    }
    cloudformation = boto3.client("cloudformation", endpoint_url=moto_url,
                                  region_name="us-east-1")
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    return name


@pytest.fixture
def upstreams() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as primary, FakeUpstream() as backup:
        backup.default = ok("from backup")
        yield primary, backup


def test_a_local_console_on_the_stack_sees_the_lambda_decisions_and_steers_it(
        moto_url: str, tmp_path: Path, upstreams: tuple[FakeUpstream, FakeUpstream]) -> None:
    primary, backup = upstreams
    stack = deploy_stack(moto_url)
    config = tmp_path / "humpyard.toml"  # the deployment's file: no [store] in it
    config.write_text(gateway_config(primary.url, backup.url, refresh_ms=REFRESH_MS) + KEYS_TOML)
    keys = {"APP_KEY": APP_KEY, "OPS_KEY": OPS_KEY}
    instance = Driver({**AWS_ENV, **keys, "AWS_ENDPOINT_URL_DYNAMODB": moto_url,
                       "HUMPYARD_STATE_TABLE": f"{stack}-state",
                       "HUMPYARD_LEDGER_TABLE": f"{stack}-ledger",
                       "HUMPYARD_CONFIG": str(config)}, tmp_path / "instance.log")
    console = ServeProcess(config, tmp_path / "console.log", command="console",
                           args=("--stack", stack, "--region", "us-east-1"),
                           env={**AWS_ENV, **keys, "AWS_ENDPOINT_URL": moto_url})
    try:
        answer = instance.invoke("gateway", event("chat_post"))["response"]
        assert answer["statusCode"] == 200, answer["body"]
        rid = answer["headers"]["x-humpyard-request-id"]
        console.start(30)
        ops = {"authorization": f"Bearer {OPS_KEY}"}

        # The instance's decision, through the console (the instance wrote it before its
        # last byte; the listing's index may lag a moment on DynamoDB itself).
        one = httpx.get(f"{console.url}/v1/decisions/{rid}", headers=ops, timeout=10)
        assert one.status_code == 200, one.text
        assert one.json()["target"] == "primary"
        listed = httpx.get(f"{console.url}/v1/decisions", headers=ops, timeout=10).json()
        assert rid in [d["request_id"] for d in listed["decisions"]]

        # No client traffic: the client paths are not served.
        refused = httpx.post(f"{console.url}/v1/chat/completions", timeout=10,
                             headers={"authorization": f"Bearer {APP_KEY}"},
                             json={"model": "auto", "messages": [{"role": "user",
                                                                  "content": "hi"}]})
        assert refused.status_code == 404

        # An override made through the console steers the instance.
        created = httpx.post(f"{console.url}/v1/overrides", headers=ops, timeout=10, json={
            "kind": "disable_target", "subject": "primary", "reason": "INC-7",
            "expires_in_secs": 600})
        assert created.status_code == 201, created.text
        before = len(primary.requests_to("/v1/chat/completions"))
        time.sleep(REFRESH_MS / 1000 * 1.5)  # one refresh of the instance's snapshot
        steered = instance.invoke("gateway", event("chat_post"))["response"]
        assert steered["headers"]["x-humpyard-target"] == "backup"
        assert len(primary.requests_to("/v1/chat/completions")) == before

        # And the console shows what the instance's health is (the shared breakers).
        health = httpx.get(f"{console.url}/v1/health", headers=ops, timeout=10).json()
        assert {e["target"] for e in health["endpoints"]} == {"primary", "backup"}
    finally:
        console.stop()
        instance.close()
    assert "testing" not in console.output()  # no credential in the console's log


def test_console_names_a_stack_without_the_outputs(moto_url: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.durability.process import ROOT
    config = tmp_path / "humpyard.toml"
    config.write_text(gateway_config("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"))
    done = subprocess.run(
        [sys.executable, "-m", "humpyard.cli", "console", "--config", str(config),
         "--stack", "no-such-stack", "--region", "us-east-1", "--port", "0"],
        env={**AWS_ENV, "AWS_ENDPOINT_URL": moto_url, "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT / "shared")},
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "--stack no-such-stack: ValidationError" in done.stderr
