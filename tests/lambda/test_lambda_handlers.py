"""Each Lambda handler, invoked with real API Gateway / EventBridge event shapes.

DynamoDB and Secrets Manager are moto (``mock_aws``, in process); the
upstreams are ``FakeUpstream`` servers on loopback. Every function module is
imported afresh per test, so each test starts with cold instances.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from lambda_support import (
    APP_KEY,
    EVENTS,
    LEDGER,
    OPS_KEY,
    STATE,
    LambdaContext,
    event,
    gateway_config,
    instance_of,
    load_function,
)
from moto import mock_aws

from humpyard.aws.env import EnvError
from humpyard.store.dynamodb import DynamoDBStore, create_tables
from tests.support import FakeUpstream, status


@dataclass
class Stack:
    """moto tables, two upstreams, a config file, and the function modules loaded so far."""

    primary: FakeUpstream
    backup: FakeUpstream
    config: Path
    dynamodb: Any
    monkeypatch: pytest.MonkeyPatch
    modules: list[ModuleType] = field(default_factory=list)

    def write_config(self, text: str) -> None:
        self.config.write_text(text)

    def function(self, name: str) -> ModuleType:
        module = load_function(name)
        self.modules.append(module)
        return module

    def invoke(self, module: ModuleType, ev: dict[str, Any]) -> dict[str, Any]:
        return module.handler(ev, LambdaContext())  # type: ignore[no-any-return]

    def store(self) -> DynamoDBStore:
        from humpyard.clock import SystemClock
        return DynamoDBStore(STATE, LEDGER, clock=SystemClock(), client=self.dynamodb)

    def close(self) -> None:
        for module in self.modules:
            instance = instance_of(module)
            if instance is not None:
                instance.close()


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with FakeUpstream() as primary, FakeUpstream() as backup, mock_aws():
        client = boto3.client("dynamodb")
        create_tables(client, STATE, LEDGER)
        config = tmp_path / "humpyard.toml"
        config.write_text(gateway_config(primary.url, backup.url))
        monkeypatch.setenv("HUMPYARD_STATE_TABLE", STATE)
        monkeypatch.setenv("HUMPYARD_LEDGER_TABLE", LEDGER)
        monkeypatch.setenv("HUMPYARD_CONFIG", str(config))
        s = Stack(primary, backup, config, client, monkeypatch)
        try:
            yield s
        finally:
            s.close()


def _emf(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in docs if "_aws" in d]


def _logs(out: str) -> list[dict[str, Any]]:
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in docs if "level" in d]


def test_chat_event_is_answered_recorded_and_measured(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = stack.function("gateway")
    resp = stack.invoke(gateway, event("chat_post"))

    assert resp["statusCode"] == 200, resp["body"]
    body = json.loads(resp["body"])
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "hello"
    headers = resp["headers"]
    rid = headers["x-humpyard-request-id"]
    assert (headers["x-humpyard-route"], headers["x-humpyard-target"]) == ("auto", "primary")
    # the decision is in DynamoDB when the handler returns, not "soon"
    decision = stack.store().get_decision(rid)
    assert decision is not None and decision["outcome"] == "ok"
    assert decision["target"] == "primary"

    out = capsys.readouterr().out
    names = {m["Name"] for d in _emf(out) for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"humpyard_requests_total", "humpyard_override_oldest_age_seconds",
            "humpyard_tokens_total"} <= names
    tokens = {doc["kind"]: doc["humpyard_tokens_total"] for doc in _emf(out)
              if "humpyard_tokens_total" in doc}
    assert tokens == {"input": 10, "output": 1}  # the fake's usage for "hello"
    [doc] = [d for d in _emf(out) if "humpyard_tokens_total" in d and d["kind"] == "input"]
    assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["service", "key", "route", "target", "kind"]]
    assert (doc["key"], doc["route"], doc["target"]) == ("-", "auto", "primary")
    for doc in _emf(out):
        directive = doc["_aws"]["CloudWatchMetrics"][0]
        assert directive["Namespace"] == "Humpyard"
        assert directive["Dimensions"][0][0] == "service" and doc["service"] == "humpyard"
    request_logs = [d for d in _logs(out) if d["message"].startswith("request ")]
    assert request_logs and request_logs[0]["function_request_id"]


def test_health_event_with_keys_from_secrets_manager(stack: Stack) -> None:
    secret = boto3.client("secretsmanager").create_secret(
        Name="humpyard/keys", SecretString=json.dumps({"APP_KEY": APP_KEY, "OPS_KEY": OPS_KEY}))
    stack.monkeypatch.setenv("HUMPYARD_SECRETS_ARN", secret["ARN"])
    stack.write_config(gateway_config(stack.primary.url, stack.backup.url, keys=True))
    admin = stack.function("admin")

    resp = stack.invoke(admin, event("health_get"))
    assert resp["statusCode"] == 200, resp["body"]
    endpoints = {e["target"]: e for e in json.loads(resp["body"])["endpoints"]}
    assert set(endpoints) == {"primary", "backup"}
    assert {e["state"] for e in endpoints.values()} == {"healthy"}

    no_key = event("health_get")
    del no_key["headers"]["x-api-key"], no_key["multiValueHeaders"]["x-api-key"]
    assert stack.invoke(admin, no_key)["statusCode"] == 401
    wrong = event("health_get", headers={"x-api-key": APP_KEY + "x"})
    assert stack.invoke(admin, wrong)["statusCode"] == 401


def test_override_event_takes_the_target_out_for_the_gateway(stack: Stack) -> None:
    stack.write_config(gateway_config(stack.primary.url, stack.backup.url, refresh_ms=100))
    gateway, admin = stack.function("gateway"), stack.function("admin")
    assert stack.invoke(gateway, event("chat_post"))["headers"]["x-humpyard-target"] == "primary"

    created = stack.invoke(admin, event("overrides_post"))
    assert created["statusCode"] == 201, created["body"]
    override = json.loads(created["body"])
    assert (override["kind"], override["subject"]) == ("disable_target", "primary")

    time.sleep(0.15)  # one refresh of the gateway instance's snapshot
    before = len(stack.primary.requests)
    resp = stack.invoke(gateway, event("chat_post"))
    assert resp["statusCode"] == 200 and resp["headers"]["x-humpyard-target"] == "backup"
    assert len(stack.primary.requests) == before

    listed = stack.invoke(admin, event("health_get", path="/v1/overrides", method="GET"))
    assert [o["id"] for o in json.loads(listed["body"])["overrides"]] == [override["id"]]


def test_scheduled_event_polls_quota_and_publishes_gauges(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeUpstream() as quota:
        quota.script(status(200, body={"usage": {"rolling": {
            "status": "ok", "percent": 42.5, "resetsAt": "2030-01-01T00:00:00Z"}}}))
        stack.write_config(gateway_config(stack.primary.url, stack.backup.url,
                                          quota_url=quota.url))
        stack.monkeypatch.setenv("QUOTA_KEY", "quota-secret-key")
        poller, admin = stack.function("quota_poller"), stack.function("admin")

        scheduled = json.loads((EVENTS / "scheduled.json").read_text())
        summary = poller.handler(scheduled, LambdaContext())
        assert summary == {"quota_providers": 1, "latency_targets": 0, "overrides_expired": []}
        assert [r.path for r in quota.requests] == ["/v1/usage"]

        out = capsys.readouterr().out
        gauges = {m["Name"]: d for d in _emf(out)
                  for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
        assert gauges["humpyard_quota_percent"]["humpyard_quota_percent"] == 42.5
        assert gauges["humpyard_override_oldest_age_seconds"]["_aws"]["CloudWatchMetrics"][0][
            "Dimensions"] == [["service"]]
        assert "quota-secret-key" not in out

        view = stack.invoke(admin, event("health_get", path="/v1/quota", method="GET"))
        (entry,) = json.loads(view["body"])["providers"]
        assert entry["state"] == "fresh" and entry["windows"]["rolling"]["percent"] == 42.5


def test_the_schedule_records_an_override_expiry_without_anyone_listing(stack: Stack) -> None:
    poller, admin = stack.function("quota_poller"), stack.function("admin")
    created = stack.invoke(admin, event("overrides_post", body={
        "kind": "disable_target", "subject": "primary", "expires_in_secs": 0.3}))
    assert created["statusCode"] == 201, created["body"]
    override = json.loads(created["body"])
    scheduled = json.loads((EVENTS / "scheduled.json").read_text())
    expired: list[str] = []
    deadline = time.monotonic() + 5
    while not expired and time.monotonic() < deadline:
        expired = poller.handler(scheduled, LambdaContext())["overrides_expired"]
        if not expired:
            time.sleep(0.05)
    assert expired == [override["id"]]
    audit = [e for e in stack.store().list_audit() if e["action"] == "expire"]
    assert [(e["override_id"], e["ts"]) for e in audit] == [
        (override["id"], override["expires_at"])]
    # exactly once: the next run records nothing more
    assert poller.handler(scheduled, LambdaContext())["overrides_expired"] == []


def test_a_ledger_write_that_fails_is_logged_with_the_whole_decision(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = stack.function("gateway")
    stack.invoke(gateway, event("chat_post"))  # warm
    stack.dynamodb.delete_table(TableName=LEDGER)
    capsys.readouterr()

    resp = stack.invoke(gateway, event("chat_post"))
    assert resp["statusCode"] == 200  # the client still gets its answer
    rid = resp["headers"]["x-humpyard-request-id"]
    errors = [d for d in _logs(capsys.readouterr().out) if d["level"] == "ERROR"]
    (unsaved,) = [d for d in errors if "decision not written" in d["message"]]
    assert rid in unsaved["message"]
    payload = json.loads(unsaved["message"].split("unsaved: ", 1)[1])
    assert payload["request_id"] == rid and payload["target"] == "primary"


def test_a_missing_variable_is_named(stack: Stack) -> None:
    stack.monkeypatch.delenv("HUMPYARD_STATE_TABLE")
    gateway = stack.function("gateway")
    with pytest.raises(EnvError, match="HUMPYARD_STATE_TABLE: required"):
        stack.invoke(gateway, event("chat_post"))


def test_unknown_paths_get_the_json_404(stack: Stack) -> None:
    gateway = stack.function("gateway")
    resp = stack.invoke(gateway, event("chat_post", path="/v2/nothing", method="GET"))
    assert resp["statusCode"] == 404
    assert json.loads(resp["body"])["error"]["code"] == "not_found"


def test_models_event_lists_the_routes(stack: Stack) -> None:
    gateway = stack.function("gateway")
    resp = stack.invoke(gateway, event("chat_post", path="/v1/models", method="GET"))
    assert resp["statusCode"] == 200
    assert "auto" in {m["id"] for m in json.loads(resp["body"])["data"]}


def _keyless(path: str) -> dict[str, Any]:
    ev = event("chat_post", path=path, method="GET")
    for headers in (ev["headers"], ev["multiValueHeaders"]):
        for name in [n for n in headers if n.lower() in ("authorization", "x-api-key")]:
            del headers[name]
    ev["body"] = None
    return ev


def test_probes_answer_without_a_key_and_readyz_follows_the_state_table(stack: Stack) -> None:
    """``/healthz`` and ``/readyz`` reach the gateway function through the API's
    catch-all route; readiness reads the state table (http/probes.py)."""
    gateway = stack.function("gateway")
    health = stack.invoke(gateway, _keyless("/healthz"))
    assert health["statusCode"] == 200, health
    ready = stack.invoke(gateway, _keyless("/readyz"))
    assert ready["statusCode"] == 200, ready
    assert json.loads(ready["body"])["checks"]["store"] == "ok"
    stack.dynamodb.delete_table(TableName=STATE)
    deadline = time.monotonic() + 10  # the store's answer is reused for a second
    while True:
        gone = stack.invoke(gateway, _keyless("/readyz"))
        if gone["statusCode"] == 503 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert gone["statusCode"] == 503, gone
    assert json.loads(gone["body"])["checks"]["store"] == "unreachable"
    assert stack.invoke(gateway, _keyless("/healthz"))["statusCode"] == 200
