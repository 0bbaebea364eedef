"""Cold start: import time and time to the first answer in a fresh interpreter.

The package is copied to a temporary tree and byte-compiled there with
``compileall --invalidation-mode unchecked-hash`` (what the SAM build does;
the checkout itself is left alone so nobody runs stale bytecode), then each
measurement is a new ``python`` process with that tree first on ``sys.path``:

- ``importtime``: ``python -X importtime -c "import humpyard.http.app"``: the
  cumulative import time and the heaviest top-level imports;
- ``app``: import of ``humpyard.http.app`` (``import_ms``), then the build
  (``create_app_ms``: importing the configuration loader — pydantic and the
  schema models, ``config_import_ms`` — loading the file, ``config_load_ms``,
  and ``create_app``), then one buffered chat request as a direct ASGI call
  (to the running simulator, ``first_request_ms``), timed inside the child;
  ``to_first_answer_ms`` is their sum, ``spawn_to_answer_ms`` the wall time
  from spawn to the answer (with the interpreter's start); also without
  byte-code, for comparison;
- ``lambda`` (when ``functions/gateway/app.py`` exists): import the entry and
  call ``handler(event, context)`` with an API Gateway REST event
  (``GET /v1/models``, a path that function serves) against DynamoDB tables
  on a local moto server; ``to_first_answer_ms`` is import + first
  invocation. Its failures are recorded, not raised.

``*_cpu_ms`` are the same spans in CPU time of the child (``process_time``),
steadier than wall time on a shared machine. Every number is the median of
``repeat`` fresh processes.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from procs import GATEWAY_CPU, LOAD_CPU, free_port, pin, start, stop, wait_http
from targets import ROOT, humpyard_config

APP_CHILD = r"""
import asyncio, json, sys, time
clock = time.perf_counter
t0, c0 = clock(), time.process_time()
from humpyard.http.app import create_app
t1, c1 = clock(), time.process_time()
from humpyard.config import load_config_text
t1c = clock()
config = load_config_text(sys.argv[1], env={})
t1l = clock()
app = create_app(config)
t2, c2 = clock(), time.process_time()
body = b'{"model":"bench","messages":[{"role":"user","content":"hi"}]}'
scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
         "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
         "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
         "server": ("127.0.0.1", 8080), "state": {},
         "headers": [(b"content-type", b"application/json"),
                     (b"content-length", str(len(body)).encode())]}
out = {}
async def call():
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}
    async def send(m):
        if m["type"] == "http.response.start":
            out["status"] = m["status"]
    await app(scope, receive, send)
asyncio.run(call())
t3, c3 = clock(), time.process_time()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "create_app_ms": (t2 - t1) * 1e3,
                  "config_import_ms": (t1c - t1) * 1e3, "config_load_ms": (t1l - t1c) * 1e3,
                  "first_request_ms": (t3 - t2) * 1e3, "to_first_answer_ms": (t3 - t0) * 1e3,
                  "import_cpu_ms": (c1 - c0) * 1e3, "to_first_answer_cpu_ms": (c3 - c0) * 1e3,
                  "status": out.get("status"), "modules": len(sys.modules)}), flush=True)
"""

LAMBDA_CHILD = r"""
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
sys.path.insert(0, sys.argv[1])
import app
t1, c1 = time.perf_counter(), time.process_time()
event = {"resource": "/{proxy+}", "path": "/v1/models", "httpMethod": "GET",
         "headers": {"Host": "example.execute-api.us-east-1.amazonaws.com", "Accept": "*/*"},
         "multiValueHeaders": {"Host": ["example.execute-api.us-east-1.amazonaws.com"],
                               "Accept": ["*/*"]},
         "queryStringParameters": None, "multiValueQueryStringParameters": None,
         "pathParameters": {"proxy": "v1/models"}, "stageVariables": None,
         "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": "GET",
                            "path": "/prod/v1/models", "stage": "prod",
                            "requestId": "bench-1", "accountId": "123456789012",
                            "identity": {"sourceIp": "127.0.0.1", "userAgent": "bench"}},
         "body": None, "isBase64Encoded": False}
class Context:
    function_name = "humpyard-gateway"; function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:humpyard-gateway"
    memory_limit_in_mb = 512; aws_request_id = "bench-1"
    log_group_name = "/aws/lambda/humpyard-gateway"; log_stream_name = "bench"
    def get_remaining_time_in_millis(self): return 30000
res = app.handler(event, Context())
t2, c2 = time.perf_counter(), time.process_time()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "first_invoke_ms": (t2 - t1) * 1e3,
                  "to_first_answer_ms": (t2 - t0) * 1e3, "import_cpu_ms": (c1 - c0) * 1e3,
                  "to_first_answer_cpu_ms": (c2 - c0) * 1e3,
                  "status": res.get("statusCode"), "modules": len(sys.modules)}), flush=True)
"""


def _copy_tree(dst: Path, compiled: bool) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "shared", dst / "shared", ignore=ignore)
    if (ROOT / "functions").is_dir():
        shutil.copytree(ROOT / "functions", dst / "functions", ignore=ignore)
    if compiled:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode",
                        "unchecked-hash", str(dst)], check=True, timeout=300)
    return dst


def _child(code: str, args: list[str], tree: Path, env: dict[str, str],
           compiled: bool) -> tuple[dict[str, Any], float]:
    full_env = {**os.environ, **env, "PYTHONPATH": str(tree / "shared")}
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not compiled:  # never leave bytecode behind: every run compiles from source
        full_env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = pin([sys.executable, "-c", code, *args], GATEWAY_CPU)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=str(tree),
                         timeout=120)
    wall = (time.perf_counter() - t0) * 1000
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("{")), None)
    if res.returncode != 0 or line is None:
        raise RuntimeError(f"exit {res.returncode}: {res.stderr.strip()[-600:]}")
    return json.loads(line), wall


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 1)


def _series(code: str, args: list[str], tree: Path, env: dict[str, str], compiled: bool,
            repeat: int, keys: tuple[str, ...]) -> dict[str, Any]:
    rows = []
    for _ in range(repeat):
        out, wall = _child(code, args, tree, env, compiled)
        out["spawn_to_answer_ms"] = wall
        rows.append(out)
    res = {k: _median(rows, k) for k in (*keys, "spawn_to_answer_ms")}
    res.update(status=rows[-1].get("status"), modules=rows[-1].get("modules"), runs=repeat)
    return res


def importtime(tree: Path, module: str, top: int = 12) -> dict[str, Any]:
    """``-X importtime`` of ``module``: cumulative ms, and own import time by package."""
    env = {**os.environ, "PYTHONPATH": str(tree / "shared")}
    res = subprocess.run(pin([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                             GATEWAY_CPU), capture_output=True, text=True, env=env, timeout=60)
    total = None
    by_package: dict[str, int] = {}
    for line in res.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cum, name = line[len("import time:"):].split("|")
        if name.strip() == module:
            total = int(cum) / 1000
        package = name.strip().split(".")[0]
        if package.startswith("humpyard"):  # one level deeper for our own modules
            package = ".".join(name.strip().split(".")[:2])
        by_package[package] = by_package.get(package, 0) + int(own)
    heavy = sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
    return {"module": module, "cumulative_ms": total,
            "own_ms_by_package": [{"package": p, "ms": round(us / 1000, 1)} for p, us in heavy]}


def _interpreter_ms(repeat: int) -> float:
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(pin([sys.executable, "-c", "pass"], GATEWAY_CPU), check=True)
        walls.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(walls), 1)


def _lambda(tree: Path, tmp: Path, sim_port: int, repeat: int) -> dict[str, Any]:
    port = free_port()
    moto = start("moto", pin([str(Path(sys.executable).parent / "moto_server"), "-H",
                              "127.0.0.1", "-p", str(port)], LOAD_CPU), tmp / "moto.log")
    try:
        wait_http(port, "/", moto, 30)
        endpoint = f"http://127.0.0.1:{port}"
        aws = {"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
        os.environ.update(aws)  # this process creates the tables through the same endpoint
        import boto3

        from humpyard.store.dynamodb_schema import create_tables
        create_tables(boto3.client("dynamodb", endpoint_url=endpoint), "bench-state",
                      "bench-ledger")
        cfg = tmp / "lambda.toml"
        cfg.write_text(humpyard_config(sim_port, None))
        fn = tree / "functions" / "gateway"
        env = {**aws, "HUMPYARD_STATE_TABLE": "bench-state",
               "HUMPYARD_LEDGER_TABLE": "bench-ledger", "HUMPYARD_CONFIG": str(cfg),
               "LAMBDA_TASK_ROOT": str(fn), "POWERTOOLS_METRICS_NAMESPACE": "Bench"}
        res = _series(LAMBDA_CHILD, [str(fn)], tree, env, True, repeat,
                      ("import_ms", "first_invoke_ms", "to_first_answer_ms", "import_cpu_ms",
                       "to_first_answer_cpu_ms"))
        res["request"] = "GET /v1/models (API Gateway REST event through handler)"
        return res
    finally:
        stop(moto)


def measure(sim_port: int, repeat: int = 5) -> dict[str, Any]:
    """Every cold-start figure; errors are recorded under ``error`` keys."""
    out: dict[str, Any] = {"repeat": repeat, "interpreter_ms": _interpreter_ms(repeat)}
    cfg = humpyard_config(sim_port, None)
    with tempfile.TemporaryDirectory(prefix="humpyard-cold-") as tmp_s:
        tmp = Path(tmp_s)
        tree = _copy_tree(tmp / "compiled", compiled=True)
        source = _copy_tree(tmp / "source", compiled=False)
        runs = sorted((importtime(tree, "humpyard.http.app") for _ in range(3)),
                      key=lambda r: r["cumulative_ms"] or 0.0)
        out["importtime"] = runs[1]  # the median run of three
        keys = ("import_ms", "create_app_ms", "config_import_ms", "config_load_ms",
                "first_request_ms", "to_first_answer_ms", "import_cpu_ms",
                "to_first_answer_cpu_ms")
        for name, t, compiled in (("app", tree, True), ("app_no_bytecode", source, False)):
            try:
                out[name] = _series(APP_CHILD, [cfg], t, {}, compiled, repeat, keys)
                out[name]["request"] = "POST /v1/chat/completions (ASGI call, buffered)"
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                out[name] = {"error": str(e)}
        if (tree / "functions" / "gateway" / "app.py").exists():
            try:
                out["lambda"] = _lambda(tree, tmp, sim_port, repeat)
                out["lambda"]["importtime"] = importtime_entry(tree)
            except Exception as e:  # noqa: BLE001 - a peer component in flux: record why
                out["lambda"] = {"error": f"{type(e).__name__}: {e}"[-800:]}
        else:
            out["lambda"] = {"error": "functions/gateway/app.py does not exist yet"}
    return out


def importtime_entry(tree: Path) -> dict[str, Any]:
    """``-X importtime`` of the Lambda entry plus what its first invocation imports."""
    code = "import sys; sys.path.insert(0, 'functions/gateway'); import app, " \
           "humpyard.http.app, mangum"
    env = {**os.environ, "PYTHONPATH": str(tree / "shared")}
    res = subprocess.run(pin([sys.executable, "-X", "importtime", "-c", code], GATEWAY_CPU),
                         capture_output=True, text=True, env=env, cwd=str(tree), timeout=60)
    total = 0
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, cum, name = line[len("import time:"):].split("|")
            if len(name) - len(name.lstrip()) <= 1:
                total += int(cum)
    return {"what": "import app + humpyard.http.app + mangum", "cumulative_ms": total / 1000}
