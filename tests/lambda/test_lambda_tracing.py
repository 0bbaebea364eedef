"""X-Ray tracing through Powertools' Tracer, switched by ``HUMPYARD_TRACING``.

Each case runs an instance in a fresh interpreter (tracing patches botocore
for the whole process) with the variables Lambda gives a traced function:
``LAMBDA_TASK_ROOT``, ``_X_AMZN_TRACE_ID`` and ``AWS_XRAY_DAEMON_ADDRESS``,
the last pointing at a UDP socket of this test, which plays the X-Ray
daemon and receives what the SDK really sends. DynamoDB is moto in the
child; the upstream is a ``FakeUpstream`` on loopback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lambda_support import ROOT, event, gateway_config

from tests.support import FakeUpstream

MANGUM_ROOT = "1-68f0c0de-4e2a1b3c5d6e7f8091a2b3c4"
ADAPTER_ROOT = "1-68f0c0df-0a1b2c3d4e5f60718293a4b5"

CHILD = """
import json, sys
import boto3, httpx
from moto import mock_aws

with mock_aws():
    from humpyard.store.dynamodb import create_tables
    create_tables(boto3.client("dynamodb"), "state", "ledger")
    from humpyard.aws.build import Instance

    class Context:
        function_name, function_version, memory_limit_in_mb = "humpyard-gateway", "1", 512
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:humpyard-gateway"
        aws_request_id = "traced"

    instance = Instance.build()
    event = json.loads(sys.argv[1])
    answer = instance.http(event, Context())  # a Mangum function: the runtime's trace

    async def through_the_adapter():  # the stream function: the header's trace
        app = instance.asgi_app()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lambda") as c:
            return (await c.post("/v1/chat/completions", content=event["body"],
                                 headers={"authorization": event["headers"]["Authorization"],
                                          "content-type": "application/json",
                                          "x-amzn-trace-id": sys.argv[2]})).status_code

    streamed = instance.run(through_the_adapter())
    instance.close()
    print(json.dumps({"mangum": answer["statusCode"], "adapter": streamed,
                      "xray_modules": sorted(m for m in sys.modules
                                             if m.split(".")[0] == "aws_xray_sdk")}))
"""


def _run_child(tmp_path: Path, tracing: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(0.2)
    try:
        with FakeUpstream() as primary, FakeUpstream() as backup:
            config = tmp_path / "humpyard.toml"
            config.write_text(gateway_config(primary.url, backup.url))
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("AWS_", "HUMPYARD_", "POWERTOOLS_", "PYTHON", "_X_"))}
            env.update({
                "PYTHONPATH": str(ROOT / "shared"), "LAMBDA_TASK_ROOT": str(ROOT / "functions"),
                "AWS_LAMBDA_FUNCTION_NAME": "humpyard-gateway", "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_REGION": "us-east-1", "HUMPYARD_STATE_TABLE": "state",
                "HUMPYARD_LEDGER_TABLE": "ledger", "HUMPYARD_CONFIG": str(config),
                "_X_AMZN_TRACE_ID": f"Root={MANGUM_ROOT};Parent=53995c3f42cd8ad8;Sampled=1",
                "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
                "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR"})
            if tracing is not None:
                env["HUMPYARD_TRACING"] = tracing
            header = f"Root={ADAPTER_ROOT};Parent=1a2b3c4d5e6f7081;Sampled=1"
            done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(event("chat_post")),
                                   header], capture_output=True, text=True, timeout=120,
                                  env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stderr[-4000:]
            result = json.loads(done.stdout.strip().splitlines()[-1])
        return result, _received(daemon)
    finally:
        daemon.close()


def _received(daemon: socket.socket) -> list[dict[str, Any]]:
    """Every segment document the child sent (header line, then the JSON document)."""
    docs = []
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            packet = daemon.recv(65536)
        except TimeoutError:
            if docs:
                break
            continue
        head, _, body = packet.decode().partition("\n")
        assert json.loads(head) == {"format": "json", "version": 1}
        docs.append(json.loads(body))
    return docs


def _flatten(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    stack = list(docs)
    while stack:
        doc = stack.pop()
        out.append(doc)
        stack.extend(doc.get("subsegments", ()))
    return out


def test_tracing_on_sends_the_request_flush_and_dynamodb_spans(tmp_path: Path) -> None:
    result, docs = _run_child(tmp_path, "true")
    assert (result["mangum"], result["adapter"]) == (200, 200)
    spans = _flatten(docs)
    requests = [s for s in spans if s["name"] == "## POST /v1/chat/completions"]
    assert {s["trace_id"] for s in requests} == {MANGUM_ROOT, ADAPTER_ROOT}
    for span in requests:
        assert span["annotations"] == {"status": 200, "route": "auto", "target": "primary"}
        assert "metadata" not in span  # no bodies: they hold prompts and answers
    flushes = [s for s in spans if s["name"] == "## ledger flush"]
    assert {s["trace_id"] for s in flushes} == {MANGUM_ROOT, ADAPTER_ROOT}
    dynamodb = [s for s in spans if s["name"] == "dynamodb" and s.get("namespace") == "aws"]
    assert {s["trace_id"] for s in dynamodb} == {MANGUM_ROOT, ADAPTER_ROOT}
    assert "TransactWriteItems" in {s["aws"]["operation"] for s in dynamodb}
    assert result["xray_modules"]


@pytest.mark.parametrize("tracing", [None, "false"])
def test_tracing_off_imports_no_xray_and_sends_nothing(tmp_path: Path,
                                                       tracing: str | None) -> None:
    result, docs = _run_child(tmp_path, tracing)
    assert (result["mangum"], result["adapter"]) == (200, 200)
    assert result["xray_modules"] == [] and docs == []
