"""Throughput with ``wrk`` (one thread, N connections), or the asyncio fallback.

``wrk`` gets a Lua script that POSTs the chat body and prints one JSON line
(requests, duration, errors, latency percentiles) from its ``done`` hook.
Without ``wrk`` the same keys come from ``httpload.run_latency`` (a Python
client, which saturates sooner: the numbers say which tool produced them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpload
from procs import LOAD_CPU, pin

INSTALL_HINT = "wrk is not installed; `apt-get install -y wrk` (Debian/Ubuntu) or " \
               "`brew install wrk`; falling back to the Python asyncio load generator"

LUA = """
wrk.method = "POST"
wrk.body = [[%(body)s]]
wrk.headers["Content-Type"] = "application/json"
%(auth)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%%d,"duration_us":%%d,"err_connect":%%d,' ..
    '"err_read":%%d,"err_write":%%d,"err_status":%%d,"err_timeout":%%d,"p50_us":%%d,' ..
    '"p90_us":%%d,"p99_us":%%d,"max_us":%%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def _sampler(sample: Callable[[], None], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        sample()


def throughput(port: int, *, model: str, stream: bool, connections: int, seconds: float,
               auth: str | None = None, during: Callable[[], None] | None = None
               ) -> dict[str, Any]:
    """Requests/s at ``connections`` for ``seconds``; ``during`` is called every 0.5 s."""
    stop = threading.Event()
    sampler = None
    if during is not None:
        sampler = threading.Thread(target=_sampler, args=(during, stop, 0.5), daemon=True)
        sampler.start()
    try:
        if have_wrk():
            return _wrk(port, model, stream, connections, seconds, auth)
        s = httpload.run_latency("127.0.0.1", port, model=model, stream=stream,
                                 connections=connections, warmup=0.5, seconds=seconds,
                                 auth=auth)
        out = httpload.summarize(s)
        return {"tool": "python-asyncio", "rps": out["rps"], "requests": out["requests"],
                "p50_ms": out["total_p50_ms"], "p99_ms": out["total_p99_ms"],
                "errors": sum(s.errors.values())}
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()


def _wrk(port: int, model: str, stream: bool, connections: int, seconds: float,
         auth: str | None) -> dict[str, Any]:
    body = httpload.chat_body(model, stream).decode()
    auth_line = f'wrk.headers["Authorization"] = "Bearer {auth}"' if auth else ""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(LUA % {"body": body, "auth": auth_line})
        cmd = pin(["wrk", "-t1", f"-c{connections}", f"-d{seconds:.0f}s", "--timeout", "10s",
                   "-s", str(script), f"http://127.0.0.1:{port}/v1/chat/completions"], LOAD_CPU)
        t0 = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
        wall = time.perf_counter() - t0
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        return {"tool": "wrk", "error": f"wrk exit {res.returncode}: "
                f"{(res.stderr or res.stdout).strip()[-300:]}", "wall_s": round(wall, 1)}
    d = json.loads(line[len("WRKJSON "):])
    errors = sum(d[k] for k in d if k.startswith("err_"))
    return {"tool": "wrk", "rps": round(d["requests"] / (d["duration_us"] / 1e6), 1),
            "requests": d["requests"], "p50_ms": d["p50_us"] / 1000,
            "p99_ms": d["p99_us"] / 1000, "max_ms": d["max_us"] / 1000, "errors": errors,
            "error_detail": {k: v for k, v in d.items() if k.startswith("err_") and v}}
