"""OpenTelemetry traces from a real ``humpyard serve``, received by an in-test OTLP
collector; and, with telemetry off, no ``opentelemetry`` import at all.

The collector is a plain HTTP server on loopback taking OTLP/HTTP protobuf at
``/v1/traces``, decoded with ``opentelemetry-proto`` (the wire format, not
the SDK that made it). The child is configured only by the standard
variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.durability.process import ROOT, ServeProcess
from tests.support.fake_upstream import FakeUpstream
from tests.support.steps import ok, status

pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

KEY = "sk-hy-telemetry-test"


class Collector:
    """Every span the collector received, decoded: name, kind, times, attributes,
    ids, and the resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def take(self, body: bytes) -> None:
        req = pb.ExportTraceServiceRequest()
        req.ParseFromString(body)
        with self.lock:
            for rs in req.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append({
                            "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                            "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                            "status": s.status.code, "resource": resource,
                            "attrs": {a.key: _value(a.value) for a in s.attributes},
                            "events": [e.name for e in s.events]})

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            time.sleep(0.05)
        with self.lock:
            return list(self.spans)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@contextmanager
def collector() -> Iterator[tuple[Collector, str]]:
    got = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/traces" and \
                    self.headers.get("content-type") == "application/x-protobuf":
                got.take(body)
                self.send_response(200)
            else:
                self.send_response(404)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_failed_over_request_is_one_server_span_with_two_attempt_spans(
        tmp_path: Path) -> None:
    cfg = tmp_path / "humpyard.toml"
    with FakeUpstream() as first, FakeUpstream() as second, collector() as (got, endpoint):
        cfg.write_text(f"""
[ledger]
path = "{tmp_path / 'ledger.db'}"
[providers.openai]
base_url = "{first.url}"
api_key_env = "HY_OTEL_UP"
[providers.backup]
base_url = "{second.url}"
api_key_env = "HY_OTEL_UP"
[targets.primary]
endpoints = [{{ provider = "openai", model = "gpt-up" }}]
[targets.fallback]
endpoints = [{{ provider = "backup", model = "backup-up" }}]
[routes.auto]
targets = ["primary", "fallback"]
[keys.dev]
key_env = "HY_OTEL_KEY"
""")
        first.script(status(503))
        second.script(ok("hi there", usage={"prompt_tokens": 12, "completion_tokens": 2}))
        env = {"HY_OTEL_KEY": KEY, "HY_OTEL_UP": "sk-up", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
               "OTEL_SERVICE_NAME": "hy-under-test", "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with ServeProcess(cfg, tmp_path / "serve.log", env=env) as server:
            before = time.time_ns()
            r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                           headers={"authorization": f"Bearer {KEY}"},
                           json={"model": "auto",
                                 "messages": [{"role": "user", "content": "hello"}]})
            after = time.time_ns()
            assert r.status_code == 200, r.text
            decision_id = r.headers["x-humpyard-request-id"]
            spans = got.wait_for(3)
    assert len(spans) == 3, (spans, server.output()[-2000:])
    [request] = [s for s in spans if s["kind"] == 2]  # SERVER
    attempts = sorted((s for s in spans if s["kind"] == 3), key=lambda s: s["start"])  # CLIENT
    assert request["resource"]["service.name"] == "hy-under-test"
    assert request["name"] == "chat auto"
    a = request["attrs"]
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "auto"
    assert a["gen_ai.response.model"] == "backup-up"
    assert a["gen_ai.provider.name"] == "backup"
    assert a["gen_ai.usage.input_tokens"] == 12
    assert a["gen_ai.usage.output_tokens"] == 2
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["humpyard.route"] == "auto"
    assert a["humpyard.target"] == "fallback"
    assert a["humpyard.decision_id"] == decision_id
    assert a["humpyard.outcome"] == "ok"
    # two processes' wall clocks: equal up to a step of the machine's clock, so a
    # little slack; the spans' order among themselves is exact (below)
    slack = 200_000_000
    assert before - slack <= request["start"] <= request["end"] <= after + slack
    assert request["end"] - request["start"] <= after - before + slack

    assert [s["name"] for s in attempts] == ["chat gpt-up", "chat backup-up"]
    failed, answered = attempts
    for s in attempts:
        assert s["trace_id"] == request["trace_id"]
        assert s["parent"] == request["span_id"]
        assert request["start"] <= s["start"] <= s["end"] <= request["end"]
        assert s["attrs"]["gen_ai.operation.name"] == "chat"
    assert failed["end"] <= answered["start"]
    assert failed["attrs"]["gen_ai.provider.name"] == "openai"
    assert failed["attrs"]["humpyard.target"] == "primary"
    assert failed["attrs"]["http.response.status_code"] == 503
    assert failed["attrs"]["error.type"] == failed["attrs"]["humpyard.failure_class"]
    assert failed["status"] == 2  # ERROR
    assert answered["attrs"]["gen_ai.request.model"] == "backup-up"
    assert answered["attrs"]["gen_ai.usage.output_tokens"] == 2
    assert answered["attrs"]["humpyard.target"] == "fallback"
    assert answered["status"] != 2


def test_a_client_traceparent_is_the_request_span_parent(tmp_path: Path) -> None:
    cfg = tmp_path / "humpyard.toml"
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with FakeUpstream() as up, collector() as (got, endpoint):
        cfg.write_text(f"""
[providers.p]
base_url = "{up.url}"
api_key_env = "HY_OTEL_UP"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[keys.dev]
key_env = "HY_OTEL_KEY"
""")
        env = {"HY_OTEL_KEY": KEY, "HY_OTEL_UP": "sk-up", "OTEL_TRACES_EXPORTER": "otlp",
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint + "/v1/traces",
               "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with ServeProcess(cfg, tmp_path / "serve.log", env=env) as server:
            r = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                           headers={"authorization": f"Bearer {KEY}",
                                    "traceparent": f"00-{trace_id}-{parent}-01"},
                           json={"model": "t", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 200, r.text
            spans = got.wait_for(2)
    [request] = [s for s in spans if s["kind"] == 2]
    assert request["trace_id"] == trace_id
    assert request["parent"] == parent
    assert request["resource"]["service.name"] == "humpyard"


def test_a_stream_and_a_refusal_are_traced_from_their_records(tmp_path: Path) -> None:
    cfg = tmp_path / "humpyard.toml"
    with FakeUpstream() as up, collector() as (got, endpoint):
        cfg.write_text(f"""
[providers.p]
base_url = "{up.url}"
api_key_env = "HY_OTEL_UP"
[targets.t]
endpoints = [{{ provider = "p", model = "m" }}]
[keys.dev]
key_env = "HY_OTEL_KEY"
""")
        up.script(ok("a streamed answer", usage={"prompt_tokens": 5, "completion_tokens": 3}))
        env = {"HY_OTEL_KEY": KEY, "HY_OTEL_UP": "sk-up", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
               "OTEL_BSP_SCHEDULE_DELAY": "50"}
        auth = {"authorization": f"Bearer {KEY}"}
        with ServeProcess(cfg, tmp_path / "serve.log", env=env) as server:
            with httpx.stream("POST", server.url + "/v1/chat/completions", headers=auth,
                              timeout=10, json={"model": "t", "stream": True,
                                                "stream_options": {"include_usage": True},
                                                "messages": [{"role": "user", "content": "x"}]}
                              ) as r:
                assert r.status_code == 200
                streamed = r.read()
            refused = httpx.post(server.url + "/v1/chat/completions", headers=auth, timeout=10,
                                 json={"model": "nope",
                                       "messages": [{"role": "user", "content": "x"}]})
            assert refused.status_code == 404
            spans = got.wait_for(3)
    assert b"[DONE]" in streamed
    servers = sorted((s for s in spans if s["kind"] == 2), key=lambda s: s["start"])
    assert [s["name"] for s in servers] == ["chat t", "chat nope"], spans
    stream, refusal = servers
    assert stream["attrs"]["humpyard.stream"] is True
    assert stream["attrs"]["gen_ai.usage.output_tokens"] == 3
    assert "gen_ai.response.finish_reasons" not in stream["attrs"]  # not kept for a stream
    [attempt] = [s for s in spans if s["kind"] == 3]
    assert attempt["parent"] == stream["span_id"]
    assert attempt["end"] == stream["end"]  # the stream was read until the request ended
    assert refusal["attrs"]["humpyard.outcome"] == "unknown_model"
    assert refusal["attrs"]["http.response.status_code"] == 404
    assert refusal["attrs"]["error.type"] == "unknown_model"
    assert "humpyard.route" not in refusal["attrs"]
    assert not [s for s in spans if s["parent"] == refusal["span_id"]]


PROBE = """
import json, os, sys
import humpyard.http.app, humpyard.serving, humpyard.recording
from humpyard import telemetry
assert telemetry.from_environ(os.environ) is None
sys.path.insert(0, os.path.join(os.environ["HY_ROOT"], "functions", "gateway"))
import app  # the Lambda entry
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")))
"""


@pytest.mark.parametrize("env", [{}, {"OTEL_SDK_DISABLED": "true",
                                       "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
                                 {"OTEL_TRACES_EXPORTER": "none"}])
def test_with_telemetry_off_opentelemetry_is_never_imported(env: dict[str, str]) -> None:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("OTEL_") and k != "AWS_LAMBDA_EXEC_WRAPPER"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=60, cwd=str(ROOT),
                         env={**base, **env, "HY_ROOT": str(ROOT),
                              "PYTHONPATH": f"{ROOT / 'shared'}{os.pathsep}{ROOT}"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_telemetry_on_is_decided_by_the_standard_variables() -> None:
    from humpyard.telemetry import enabled
    assert not enabled({})
    assert enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert enabled({"OTEL_TRACES_EXPORTER": "console,otlp"})
    assert enabled({"AWS_LAMBDA_EXEC_WRAPPER": "/opt/otel-instrument"})
    assert not enabled({"OTEL_TRACES_EXPORTER": "none",
                        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not enabled({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
