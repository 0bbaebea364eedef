"""Helpers for the Lambda tests: configurations, API Gateway events, handler modules.

The events are the files in ``infra/events/`` (real API Gateway REST proxy
and EventBridge shapes); ``event(name, body=...)`` loads one, optionally
with another JSON body. ``load_function(name)`` imports
``functions/<name>/app.py`` afresh, as a new Lambda instance would.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "infra" / "events"
FUNCTIONS = ROOT / "functions"
STATE = "humpyard-state"
LEDGER = "humpyard-ledger"
APP_KEY = "hk-app-example-key"  # the keys infra/events/*.json present
OPS_KEY = "hk-ops-example-key"


def gateway_config(primary_url: str, backup_url: str, *, refresh_ms: int = 200,
                   cooldown_secs: float = 60, keys: bool = False,
                   quota_url: str | None = None, spare_endpoint: bool = False) -> str:
    """Route ``auto``: target ``primary`` then ``backup``, one failure trips a breaker.

    ``spare_endpoint`` gives ``primary`` a second endpoint (on the backup
    server): a half-open endpoint that is not its target's last is skipped
    by every request but the one holding the probe lease.
    """
    spare = ', { provider = "up2", model = "model-spare" }' if spare_endpoint else ""
    priced = '{ provider = "up1", model = "model-a", price = { input = 1.0, output = 2.0 } }'
    text = f"""
state_refresh_ms = {refresh_ms}

[providers.up1]
base_url = "{primary_url}"
timeout_secs = 10

[providers.up2]
base_url = "{backup_url}"
timeout_secs = 10

[targets.primary]
endpoints = [{priced}{spare}]

[targets.backup]
endpoints = [{{ provider = "up2", model = "model-b" }}]

[routes.auto]
type = "passthrough"
targets = ["primary", "backup"]

[health]
failure_threshold = 1
cooldown_secs = {cooldown_secs}
max_cooldown_secs = {max(cooldown_secs, 1)}
"""
    if quota_url:
        text = text.replace('[targets.primary]', f"""[providers.quota]
base_url = "{quota_url}"
api_key_env = "QUOTA_KEY"
quota_source = "opencode-go"

[targets.primary]""")
    if keys:
        text += """
[keys.app]
key_env = "APP_KEY"
budget = { usd = 100.0, period = "day" }

[keys.ops]
key_env = "OPS_KEY"
manage_overrides = true
"""
    return text


def event(name: str, *, body: Any = None, headers: dict[str, str] | None = None,
          path: str | None = None, method: str | None = None,
          query: dict[str, str] | None = None) -> dict[str, Any]:
    """``infra/events/<name>.json``, with the body, headers, path or query replaced."""
    ev: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    if body is not None:
        ev["body"] = json.dumps(body)
    for k, v in (headers or {}).items():
        ev["headers"][k] = v
        ev["multiValueHeaders"][k] = [v]
    if path is not None:
        ev["path"] = ev["resource"] = ev["requestContext"]["resourcePath"] = path
        ev["requestContext"]["path"] = "/" + ev["requestContext"]["stage"] + path
    if method is not None:
        ev["httpMethod"] = ev["requestContext"]["httpMethod"] = method
    if query is not None:
        ev["queryStringParameters"] = query
        ev["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return ev


class LambdaContext:
    """The attributes of the Lambda context object that Powertools reads."""

    def __init__(self, function_name: str = "humpyard-test") -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}")
        self.aws_request_id = "6f2b9d7e-3c1a-4e5f-8a9b-0c1d2e3f4a5b"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "2026/11/16/[$LATEST]0123456789abcdef"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


_loaded = 0


def load_function(name: str) -> ModuleType:
    """Import ``functions/<name>/app.py`` as a brand-new module (a fresh instance)."""
    global _loaded
    _loaded += 1
    module_name = f"_humpyard_fn_{name}_{_loaded}"
    spec = importlib.util.spec_from_file_location(module_name, FUNCTIONS / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def instance_of(module: ModuleType) -> Any:
    """The ``Instance`` a loaded function module built (None before its first invocation)."""
    return module._instance._value


# -- several instances in several processes -------------------------------------------


class SerialMotoServer:
    """moto's server on 127.0.0.1 (a free port), answering one request at a time.

    DynamoDB applies each request atomically (a conditional write never
    interleaves with another on the same item); moto's backend does no
    locking, so the threaded server runs requests under one lock to keep that
    guarantee and test the gateway's logic rather than the emulator's races.
    ``calls`` counts the requests it answered by operation (``PutItem``, ...).
    """

    def __init__(self) -> None:
        import threading
        from collections import Counter

        from moto.server import ThreadedMotoServer

        lock = threading.Lock()
        calls: Counter[str] = Counter()
        self.calls = calls

        class _Serial(ThreadedMotoServer):
            def _server_entry(self) -> None:
                from moto.moto_server.werkzeug_app import (
                    DomainDispatcherApplication,
                    create_backend_app,
                )
                from werkzeug.serving import make_server

                dispatch = DomainDispatcherApplication(create_backend_app)

                def app(environ: Any, start_response: Any) -> Any:
                    with lock:
                        target = str(environ.get("HTTP_X_AMZ_TARGET") or "")
                        calls[target.rpartition(".")[2] or "other"] += 1
                        return list(dispatch(environ, start_response))

                # werkzeug's own request handler: moto's (5.2 on) only keeps the
                # spelling of S3 metadata headers, which DynamoDB never sends
                self._server = make_server(self._ip_address, self._port, app, True)
                self._server_ready_event.set()
                self._server.serve_forever()

        self._server = _Serial(ip_address="127.0.0.1", port=0, verbose=False)

    def __enter__(self) -> SerialMotoServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        host, port = self._server.get_host_and_port()
        return f"http://{host}:{port}"


class Driver:
    """``lambda_driver.py`` in a child process: one Lambda instance (per function) of its own."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        import os
        import queue
        import subprocess
        import threading

        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("AWS_", "HUMPYARD_", "POWERTOOLS_", "PYTHON"))}
        clean.update(env)
        clean["DRIVER_LOG"] = str(log)
        clean["PYTHONPATH"] = os.pathsep.join(str(p) for p in (FUNCTIONS, ROOT / "shared"))
        self.log = log
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("lambda_driver.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=clean, cwd=ROOT)
        self._answers: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._answers.put(line)

    def send(self, function: str, ev: dict[str, Any]) -> None:
        """Start an invocation; ``receive`` collects it."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"op": "invoke", "function": function,
                                           "event": ev}) + "\n")
        self._proc.stdin.flush()

    def receive(self, timeout: float = 30) -> dict[str, Any]:
        """The answer to the oldest outstanding invocation: response, DynamoDB calls, ms."""
        import queue

        try:
            answer: dict[str, Any] = json.loads(self._answers.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer in {timeout} s; log:\n{self.log_text()}") from None
        if "error" in answer:
            raise AssertionError(f"{answer['error']}\nlog:\n{self.log_text()}")
        return answer

    def invoke(self, function: str, ev: dict[str, Any]) -> dict[str, Any]:
        self.send(function, ev)
        return self.receive()

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def quit(self) -> None:
        """Ask the process to exit (``close`` waits for it)."""
        stdin = self._proc.stdin
        if self._proc.poll() is None and stdin is not None and not stdin.closed:
            try:
                stdin.write(json.dumps({"op": "quit"}) + "\n")
                stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        import subprocess

        self.quit()
        if self._proc.poll() is None:
            try:
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._reader.join(timeout=5)


def item_bytes(item: dict[str, dict[str, Any]]) -> int:
    """DynamoDB's size of an item in wire form: names plus values (numbers approximated)."""
    def value(v: dict[str, Any]) -> int:
        (kind, x), = v.items()
        if kind == "S":
            return len(x.encode())
        if kind == "N":
            digits = len(x.replace("-", "").replace(".", "").lstrip("0")) or 1
            return (digits + 1) // 2 + 1
        if kind == "BOOL" or kind == "NULL":
            return 1
        if kind == "B":
            return len(x)
        if kind == "M":
            return 3 + sum(len(k.encode()) + value(w) for k, w in x.items())
        if kind == "L":
            return 3 + sum(1 + value(w) for w in x)
        return len(json.dumps(x))
    return sum(len(name.encode()) + value(v) for name, v in item.items())
