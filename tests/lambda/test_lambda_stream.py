"""The stream function as Lambda runs it: ``run.sh`` → uvicorn → ``main:create_app``.

The Lambda Web Adapter is a proxy that forwards each invocation to the
port ``run.sh`` listens on and streams the answer back; here the test plays
the adapter and talks HTTP to that port directly. DynamoDB is the shared
moto server. What is checked: SSE chunks reach the client as the upstream
produces them, the decision is stored before the stream's last byte, and
SIGTERM (Lambda's shutdown) ends the process cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from lambda_support import FUNCTIONS, LEDGER, ROOT, gateway_config

from humpyard.clock import SystemClock
from humpyard.store.dynamodb import DynamoDBStore, create_tables
from tests.support import FakeUpstream, free_port, ok
from tests.support.steps import delay, status


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"run.sh exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port} after {timeout} s:\n{log.read_text()}")


class StreamFunction:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path, store: DynamoDBStore):
        self.url, self.proc, self.log, self.store = url, proc, log, store


@pytest.fixture
def stream_function(moto_url: str, tmp_path: Path) -> Iterator[tuple[StreamFunction, FakeUpstream]]:
    suffix = uuid.uuid4().hex[:8]
    state, ledger = f"state-{suffix}", f"{LEDGER}-{suffix}"
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")
    create_tables(dynamodb, state, ledger)
    with FakeUpstream() as primary, FakeUpstream() as backup:
        config = tmp_path / "humpyard.toml"
        config.write_text(gateway_config(primary.url, backup.url))
        port = free_port()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "HUMPYARD_", "POWERTOOLS_", "PYTHON"))}
        env.update({
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": str(ROOT / "shared"), "LAMBDA_TASK_ROOT": str(FUNCTIONS),
            "AWS_LWA_PORT": str(port), "AWS_ENDPOINT_URL_DYNAMODB": moto_url,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
            "HUMPYARD_STATE_TABLE": state, "HUMPYARD_LEDGER_TABLE": ledger,
            "HUMPYARD_CONFIG": str(config), "POWERTOOLS_SERVICE_NAME": "humpyard"})
        log = tmp_path / "stream.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", str(FUNCTIONS / "stream" / "run.sh")], env=env,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            _wait_for_port(port, proc, log, timeout=30)
            store = DynamoDBStore(state, ledger, clock=SystemClock(), client=dynamodb)
            yield StreamFunction(f"http://127.0.0.1:{port}", proc, log, store), primary
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def test_a_streamed_answer_arrives_as_produced_and_is_recorded_before_its_end(
        stream_function: tuple[StreamFunction, FakeUpstream]) -> None:
    fn, primary = stream_function
    primary.script(ok(["Hel", "lo ", "there"], chunk_delay=0.4))
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.Client(timeout=20) as client, client.stream(
            "POST", fn.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        rid = resp.headers["x-humpyard-request-id"]
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                if delta:
                    arrivals.append((time.monotonic() - started, delta))
        # the last byte is out: the decision must already be in DynamoDB
        decision = fn.store.get_decision(rid)
    assert [d for _, d in arrivals] == ["Hel", "lo ", "there"]
    assert arrivals[-1][0] - arrivals[0][0] >= 0.6  # streamed, not buffered to the end
    assert decision is not None and decision["outcome"] == "ok"

    fn.proc.send_signal(signal.SIGTERM)  # what Lambda does when it reaps the instance
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert fn.proc.wait(timeout=15) in (0, -signal.SIGTERM)
    text = fn.log.read_text()
    assert "Traceback" not in text, text
    lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    assert any(x.get("message") == "instance shutting down" for x in lines)
    assert any(x.get("correlation_id") == rid for x in lines if "level" in x)
    assert any("_aws" in x for x in lines)


def test_a_streamed_responses_request_relays_event_by_event(
        stream_function: tuple[StreamFunction, FakeUpstream]) -> None:
    # Codex CLI speaks only the Responses API; API Gateway sends POST /v1/responses to
    # this function (template.yaml), so its events must leave as the upstream makes them.
    fn, primary = stream_function
    primary.script(ok(["Hel", "lo ", "there"], chunk_delay=0.4))
    body = {"model": "auto", "stream": True, "input": "hi"}
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.Client(timeout=20) as client, client.stream(
            "POST", fn.url + "/v1/responses", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        rid = resp.headers["x-humpyard-request-id"]
        for line in resp.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event.get("type") == "response.output_text.delta":
                    arrivals.append((time.monotonic() - started, event["delta"]))
        decision = fn.store.get_decision(rid)
    assert [d for _, d in arrivals] == ["Hel", "lo ", "there"]
    assert arrivals[-1][0] - arrivals[0][0] >= 0.6  # relayed as produced, not buffered
    assert decision is not None and decision["outcome"] == "ok"


def test_the_counts_an_instance_held_back_go_out_at_its_shutdown(
        stream_function: tuple[StreamFunction, FakeUpstream]) -> None:
    # Counters add up in the instance and print once a minute (aws/emission.py); the
    # adapter's shutdown is where the stream function prints what is still waiting.
    fn, primary = stream_function
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=20) as client:
        for _ in range(3):
            primary.script(ok("hi"))
            assert client.post(fn.url + "/v1/chat/completions", json=body).status_code == 200

    def counted() -> float:
        lines = [json.loads(x) for x in fn.log.read_text().splitlines() if x.startswith("{")]
        return sum(x.get("humpyard_requests_total", 0) for x in lines)

    assert counted() == 1  # the first request's flush printed; two are waiting
    fn.proc.send_signal(signal.SIGTERM)
    assert fn.proc.wait(timeout=15) in (0, -signal.SIGTERM)
    assert counted() == 3


def test_a_slow_first_content_gets_comments_and_fails_over_behind_them(
        stream_function: tuple[StreamFunction, FakeUpstream]) -> None:
    # Issue 26: 17 s of upstream delay gave the client 17 s of silence. The stream
    # function sends the head and SSE comments from the first second (ADR 0020); the
    # primary failing after them still fails over to the backup (its default answer).
    fn, primary = stream_function
    primary.script(delay(2.5, status(500)))
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    with httpx.Client(timeout=20) as client, client.stream(
            "POST", fn.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        rid = resp.headers["x-humpyard-request-id"]
        for line in resp.iter_lines():
            lines.append((time.monotonic() - started, line))
        decision = fn.store.get_decision(rid)  # the last byte is out: it is stored
    beats = [t for t, line in lines if line == ": keep-alive"]
    content = [t for t, line in lines if '"content":"' in line]
    assert beats and content and beats[0] < 2.5 <= content[0]
    assert decision is not None and decision["outcome"] == "ok"
    assert decision["target"] == "backup"
